"""Hooks of the schemathesis run (``tests/core/test_schemathesis.py``), loaded by its CLI.

A fuzzer reuses short header values across requests, so a generated ``Idempotency-Key`` would
replay an earlier answer (a resource since deleted) or be refused as reused with another body:
answers that depend on the run's history, not on the request. Each call gets a key of its own
(a valid generated key, made unique; an invalid one is sent as generated).
"""

import uuid

import schemathesis

from dealbroker.core.idempotency import HEADER, MAX_KEY_LENGTH


def _valid(key: str) -> bool:
    return 1 <= len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable()


@schemathesis.hook
def before_call(context, case, **kwargs):  # noqa: ANN001, ANN003, ANN201, ARG001
    key = (case.headers or {}).get(HEADER)
    if isinstance(key, str) and _valid(key):
        unique = uuid.uuid4().hex
        case.headers[HEADER] = key[: MAX_KEY_LENGTH - len(unique) - 1] + "-" + unique
