"""The job runner: a commit wakes only the job whose work it queued; polling runs them all."""

import asyncio

import pytest

from dealbroker import worker as worker_module
from dealbroker.core import wakeup
from tests.conftest import eventually, make_settings


class Counting:
    """A job that counts its runs and finds nothing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.every = 0.0
        self.more = False
        self.runs = 0
        self.halted = False

    async def run_once(self) -> int:
        self.runs += 1
        return 0

    def halt(self) -> None:
        self.halted = True

    async def aclose(self) -> None:
        return None


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, Counting]:
    jobs = {name: Counting(name) for name in ("deliveries", "deadlines", "mail")}
    monkeypatch.setattr(worker_module, "jobs", lambda sessionmaker, settings: list(jobs.values()))
    return jobs


async def test_a_commit_wakes_only_the_job_whose_work_it_queued(
    db_url, engine, sessionmaker, counting
):
    from sqlalchemy import text

    # Polls far apart: every run after the first round is a wake-up's.
    settings = make_settings(db_url, worker_poll_seconds=60)
    runner = worker_module.Runner(sessionmaker, settings, engine)
    stop = asyncio.Event()
    running = asyncio.create_task(runner.run(stop))
    try:
        await eventually(lambda: all(job.runs == 1 for job in counting.values()))  # the first round
        await asyncio.sleep(0.5)  # its LISTEN connection is open (PostgreSQL)
        for _ in range(3):
            async with sessionmaker() as session, session.begin():
                await wakeup.mark(session, wakeup.DELIVERIES)
        await eventually(lambda: counting["deliveries"].runs >= 2)
        async with sessionmaker() as session, session.begin():
            await wakeup.mark(session, wakeup.MAIL)
            await wakeup.mark(session, wakeup.MAIL)  # once per transaction
        await eventually(lambda: counting["mail"].runs >= 2)
        # On PostgreSQL a commit wakes twice at most: in this process, and by its NOTIFY.
        await asyncio.sleep(0.5)
        assert counting["deadlines"].runs == 1
        before = {name: job.runs for name, job in counting.items()}
        async with sessionmaker() as session:
            await session.begin()
            await wakeup.mark(session, wakeup.DELIVERIES)
            await session.rollback()  # nothing queued after all: nobody woken
        await asyncio.sleep(0.3)
        assert counting["deliveries"].runs == before["deliveries"]
        if engine.dialect.name == "postgresql":
            # A notification without a payload (an older version's) wakes every job.
            async with engine.connect() as conn:
                await conn.execute(text(f"NOTIFY {wakeup.CHANNEL}"))
                await conn.commit()
            await eventually(lambda: counting["deadlines"].runs == 2)
            assert counting["mail"].runs == before["mail"] + 1
            assert counting["deliveries"].runs == before["deliveries"] + 1
    finally:
        stop.set()
        await running
        await runner.aclose()
    assert all(job.halted for job in counting.values())


async def test_an_idle_runner_polls_every_job(db_url, sessionmaker, counting):
    runner = worker_module.Runner(sessionmaker, make_settings(db_url, worker_poll_seconds=0.1))
    stop = asyncio.Event()
    running = asyncio.create_task(runner.run(stop))
    try:
        await eventually(lambda: all(job.runs >= 3 for job in counting.values()))
    finally:
        stop.set()
        await running
        await runner.aclose()
