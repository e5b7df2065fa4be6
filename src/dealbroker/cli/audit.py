"""``dealbroker audit``: the audit trail of operator actions (back office and CLI)."""

import sys
from typing import Annotated

import typer

from dealbroker.cli.common import _in_transaction, _print

app = typer.Typer(help="The audit trail: who did what, when.", no_args_is_help=True)


@app.command("list")
def audit_list(
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    page: Annotated[int, typer.Option("--page", min=1, max=1_000_000)] = 1,
) -> None:
    """The trail, newest first, one JSON object a line."""
    from dealbroker.audit import service

    rows, _total = _in_transaction(lambda s: service.page(s, page, limit))
    for row in rows:
        _print(
            {
                "id": row.id,
                "at": row.at,
                "actor": row.actor,
                "action": row.action,
                "targetType": row.target_type,
                "targetId": row.target_id,
                "before": row.before,
                "after": row.after,
                "requestId": row.request_id,
            }
        )


@app.command("export")
def audit_export() -> None:
    """The whole trail as CSV on standard output (cells that a spreadsheet would read as a
    formula start with a quote)."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from dealbroker.audit import service

    async def write(session: AsyncSession) -> None:
        async for chunk in service.export(session):
            sys.stdout.write(chunk)

    _in_transaction(write)
