"""The ``dealbroker`` command: serve, migrate, the operator's integration commands, and the
sandbox's (``trigger``, ``sandbox``)."""

import typer

from dealbroker.cli import (
    deals,
    disputes,
    integrations,
    listen,
    sandbox,
    server,
    trigger,
    webhooks,
)

# Still importable from here, where it lived before the commands were split into modules.
from dealbroker.cli.common import _validated as _validated

app = typer.Typer(
    help="dealbroker: brokers second-hand deals for marketplaces.", no_args_is_help=True
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
app.add_typer(sandbox.app, name="sandbox")
