"""The webhook retry schedule, the one place it is written down.

The delivery job (``events.tasks``) follows it; the settings read the window it spans to refuse
an event retention shorter than the time an event may still be retried.
"""

import math
from datetime import timedelta

# Standard Webhooks' schedule: the first attempt at once, then these waits (about 3 days).
RETRY_DELAYS = tuple(
    timedelta(seconds=s)
    for s in (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 14 * 3600, 20 * 3600, 24 * 3600)
)
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
JITTER = 0.10  # each wait is stretched by up to this share, at random

# From the first attempt to the last, at the longest jitter can make it.
RETRY_WINDOW = sum(RETRY_DELAYS, timedelta()) * (1 + JITTER)
RETRY_WINDOW_DAYS = math.ceil(RETRY_WINDOW / timedelta(days=1))
