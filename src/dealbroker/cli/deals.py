"""``dealbroker deals``: the operator looks at one deal."""

import uuid

import typer

from dealbroker.cli.common import _in_transaction, _print

app = typer.Typer(help="Look at deals, for support work.", no_args_is_help=True)


@app.command("show")
def deals_show(deal_id: uuid.UUID) -> None:
    """Everything about one deal: history, offers, deadlines, payments, provider calls, payout
    account (last digits), events and their deliveries, messages, the parties' conversations
    (hidden messages too, marked), and the dispute's evidence."""
    from dealbroker.disputes.dossier import dossier

    _print(_in_transaction(lambda s: dossier(s, deal_id)))
