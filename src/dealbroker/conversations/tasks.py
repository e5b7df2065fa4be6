"""The conversations' job: the e-mail that tells a party what the other wrote (``mail``).

Each run writes the mails that have come due, one conversation and reader per transaction, a
bounded batch. Nothing wakes it on a commit: a message makes its mail due a little later
(``service._schedule_mail``), so the job polls, often enough for a mail to leave soon after it
is due (a quarter of the batch window, at most every ``MAX_EVERY`` seconds). The outbox job
sends what it wrote.
"""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.conversations import mail
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings

BATCH = 20
MAX_EVERY = 30.0  # seconds between polls at most: a mail due waits no longer than this


class ConversationMailJob(ShortJob):
    name = "conversation-mail"

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        super().__init__(sessionmaker, settings)
        self.every = min(MAX_EVERY, settings.message_mail_batch_seconds / 4)

    async def run_once(self) -> int:
        done = 0
        while done < BATCH:
            async with self.sessionmaker() as session, session.begin():
                if not await mail.tell_next(session):
                    break
            done += 1
        self.more = done == BATCH
        return done
