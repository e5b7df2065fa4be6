"""The ``dealbroker`` command: serve, migrate, the operator's integration, dispute and payout
commands, and the sandbox's (``trigger``, ``sandbox``)."""

import sys

from dealbroker.core.metrics_directory import prepare_for_command

# First: prometheus_client, which the commands below import, chooses at its import where
# metrics live; ``serve`` and ``worker`` share files with the other processes of the host.
prepare_for_command(sys.argv[1:2])

import typer  # noqa: E402

from dealbroker.cli import (  # noqa: E402
    audit,
    deals,
    disputes,
    integrations,
    listen,
    operators,
    payments,
    payouts,
    portal,
    sandbox,
    server,
    trigger,
    webhooks,
)

# Still importable from here, where it lived before the commands were split into modules.
from dealbroker.cli.common import _validated as _validated  # noqa: E402
from dealbroker.core.settings import InvalidSettings  # noqa: E402
from dealbroker.settlement import install as install_settlement  # noqa: E402

# Every command that touches payments (payouts, late refunds, disputes) reaches the deals
# through the settlement handler.
install_settlement()

app = typer.Typer(
    help="dealbroker: brokers second-hand deals for marketplaces.",
    no_args_is_help=True,
    # A traceback's local variables could hold the settings' keys and passwords.
    pretty_exceptions_show_locals=False,
)
app.command()(server.migrate)
app.command()(server.serve)
app.command()(server.worker)
app.command()(listen.listen)
app.command()(trigger.trigger)
app.add_typer(integrations.app, name="integrations")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(deals.app, name="deals")
app.add_typer(disputes.app, name="disputes")
app.add_typer(payments.app, name="payments")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(payouts.app, name="payouts")
app.add_typer(operators.app, name="operators")
app.add_typer(portal.app, name="portal")
app.add_typer(audit.app, name="audit")


def main() -> None:
    """The ``dealbroker`` command. A refused configuration is one line naming the settings and
    why (never their values), and exit status 2."""
    try:
        app()
    except InvalidSettings as exc:
        typer.echo(f"error: configuration refused: {exc}", err=True)
        raise SystemExit(2) from None
