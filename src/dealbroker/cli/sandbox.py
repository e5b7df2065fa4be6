"""``dealbroker sandbox``: sandbox helpers."""

import uuid
from typing import Annotated, Any

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.cli.common import ClientId, _in_transaction, _print, _with_sessionmaker
from dealbroker.core.settings import get_settings
from dealbroker.integrations import service as integrations

app = typer.Typer(help="Sandbox helpers.", no_args_is_help=True)


@app.command("advance-clock")
def sandbox_advance_clock(
    client_id: ClientId,
    seconds: Annotated[int, typer.Option(min=1, help="How far to move the clock ahead.")],
    deal: Annotated[
        uuid.UUID | None,
        typer.Option(
            "--deal",
            help="Move only this deal's own clock (its id); the integration's other deals keep "
            "their time.",
        ),
    ] = None,
) -> None:
    """Move an integration's sandbox clock ahead, or one deal's own (``--deal``); deadlines now
    due fire at once."""
    settings = get_settings()
    if not settings.is_sandbox:
        typer.echo("error: the clock can only move in the sandbox", err=True)
        raise typer.Exit(2)
    from dealbroker.sandbox import service as sandbox

    if deal is not None:
        deal_id = deal

        async def advance_deal(session: AsyncSession) -> dict[str, Any]:
            integration = await integrations.get_by_client_id(session, client_id)
            return await sandbox.advance_deal_clock(session, integration, deal_id, seconds)

        answer = _in_transaction(advance_deal)
        fired = _with_sessionmaker(lambda sm: sandbox.let_deal_time_pass(sm, settings, deal_id))
        _print({**answer, "timersFired": fired})
        return

    async def advance(session: AsyncSession) -> tuple[int, int]:
        integration = await integrations.get_by_client_id(session, client_id)
        return await sandbox.advance_clock(session, integration, seconds)

    offset, moved = _in_transaction(advance)

    fired = _with_sessionmaker(lambda sm: sandbox.let_time_pass(sm, settings))
    _print({"clockOffsetSeconds": offset, "timersMoved": moved, "timersFired": fired})
