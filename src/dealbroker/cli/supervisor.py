"""The supervisor of ``serve --workers N``: uvicorn's, with an exit status a service manager
can act on.

uvicorn's supervisor restarts a server process that dies, replaces every one on SIGHUP (each
replacement serving before its predecessor is stopped: a reload without a refused request), and
stops the others and returns when a replacement fails to start. It returns normally in that case
as on SIGTERM, so ``serve`` exited 0 and a unit with ``Restart=on-failure`` stayed down. This one
remembers whether a stop signal ended it; any other end is a failure.
"""

from uvicorn.supervisors.multiprocess import Multiprocess


class Supervisor(Multiprocess):
    stopped_by_signal = False

    def handle_int(self) -> None:
        self.stopped_by_signal = True
        super().handle_int()

    def handle_term(self) -> None:
        self.stopped_by_signal = True
        super().handle_term()
