"""What starting a process made, kept out of the garbage collector's walks.

A server or worker process makes some 150,000 objects as it starts (the modules, the settings,
the engine, the app and its routes, the jobs), and every one lives as long as the process. The
collector's full collections walk every object it tracks, so each walked all of them again;
a request or a batch of deliveries that keeps enough objects alive sets one off every so often
(bench/README.md has what that cost the delivery worker and a deal get). Frozen once
started, they are left out: what later requests make is collected as before.
"""

import functools
import gc


@functools.cache
def freeze() -> None:
    """Collect what starting left as garbage, then freeze every object alive now (once per
    process: a test process starts many apps, and only the first one's objects are frozen). A
    reference cycle among frozen objects that becomes garbage later is never collected: what
    is frozen here lives as long as the process anyway."""
    gc.collect()
    gc.freeze()
