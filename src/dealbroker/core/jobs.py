"""What the worker's jobs of short runs share (the worker's ``Job`` protocol): each run is a
bounded batch in short transactions, so a halt has nothing to cut short and a job holds
nothing to close."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.settings import Settings


class ShortJob:
    """A job whose runs are short. A subclass names itself and sets ``more`` in ``run_once``."""

    every = 0.0
    more = False

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self.sessionmaker = sessionmaker
        self.settings = settings

    def halt(self) -> None:
        return None  # each run is short: nothing to cut short

    async def aclose(self) -> None:
        return None
