"""How long reading a message for warnings takes (``conversations.warnings.found``), at the
default and the largest message length, on ordinary and on hostile texts (runs of what the
patterns look for, the cases a backtracking pattern turns quadratic).

Prints milliseconds per message (the cheapest of 15 runs) and the ratio to a baseline measured in the same run: lower
casing and splitting the same text into words, which any reading of it costs. A linear reader
stays within a small multiple of the baseline as the text grows fivefold; a quadratic one grows
25 times. Run: ``.venv/bin/python bench/bench_message_warnings.py``.
"""

import time
from collections.abc import Callable

from dealbroker.conversations.warnings import found

ORDINARY = (
    "Hei! Er rammen 56 cm? Kan jeg hente den 12.12.2026 kl. 17:30, eller sender du med posten? "
)
HOSTILE = {
    "dots": "a.",
    "at signs": "a@",
    "hyphens": "x-",
    "digits": "1 ",
    "spaces after a payment word": "bank ",
}


def _best_ms(work: Callable[[], object], repeat: int = 15) -> float:
    """The cheapest of ``repeat`` runs: what the work costs on a machine that others share."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    print(f"{'text':32} {'chars':>6} {'found ms':>9} {'baseline ms':>12} {'ratio':>7}")
    for length in (2000, 10000):
        cases = {"ordinary": ORDINARY, **HOSTILE}
        for name, unit in cases.items():
            text = (unit * (length // len(unit) + 1))[:length]
            spent = _best_ms(lambda t=text: found(t))
            baseline = _best_ms(lambda t=text: t.lower().split())
            print(f"{name:32} {length:6} {spent:9.3f} {baseline:12.3f} {spent / baseline:7.1f}")


if __name__ == "__main__":
    main()
