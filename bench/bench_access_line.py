"""What writing one access line costs, in process: the line made and redacted whole by the log's
filter (as it was made before ``request_log.access_line``) against the line made in parts by
``access_line``, each through the filter and the text formatter into memory.

    .venv/bin/python bench/bench_access_line.py [--lines 20000] [--rounds 7]

Prints the median CPU µs per line over the rounds, and the same for making and redacting the
line alone (no logging call), for three requests: ``/healthz`` and a deal get with the
middleware's request id, and ``/healthz`` with a request id the client sent (a uuid).
"""

import argparse
import io
import logging
import statistics
import time
import uuid
from collections.abc import Callable

from dealbroker.core import logs
from dealbroker.core.request_log import access_line, loggable, loggable_path

FORMAT = "%s %s %s %.1fms rid=%s"
REQUESTS = {
    "/healthz": ("/healthz", uuid.uuid4().hex),
    "deal get": ("/deals/v1/deals/3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10", uuid.uuid4().hex),
    "/healthz, client's id": ("/healthz", str(uuid.uuid4())),
}


def variants(log: logging.Logger) -> dict[str, Callable[[str, str], object]]:
    def whole(path: str, rid: str) -> None:
        log.info(FORMAT, loggable("GET"), loggable_path(path), 200, 1.234, rid)

    def parts(path: str, rid: str) -> None:
        log.info(access_line("GET", path, 200, 1.234, rid))

    def whole_text(path: str, rid: str) -> str:
        return logs.redact(FORMAT % (loggable("GET"), loggable_path(path), 200, 1.234, rid))

    def parts_text(path: str, rid: str) -> str:
        return access_line("GET", path, 200, 1.234, rid)

    return {
        "logged, whole": whole,
        "logged, parts": parts,
        "made, whole": whole_text,
        "made, parts": parts_text,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.formatter("text"))
    log = logging.getLogger("dealbroker.http")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    for name, (path, rid) in REQUESTS.items():
        figures = []
        for variant, write in variants(log).items():
            rounds = []
            for _ in range(args.rounds):
                stream.seek(0)
                stream.truncate()
                started = time.process_time()
                for _ in range(args.lines):
                    write(path, rid)
                rounds.append((time.process_time() - started) / args.lines * 1e6)
            figures.append(f"{variant} {statistics.median(rounds):5.1f}")
        print(f"{name:22s} " + "   ".join(figures) + "  (µs)")


if __name__ == "__main__":
    main()
