"""The sandbox tests' fixtures."""

from collections.abc import Iterator

import pytest

from tests.sandbox.calls import Receiver, start_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = start_receiver()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()
