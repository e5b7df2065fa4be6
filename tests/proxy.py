"""A loopback TCP proxy in front of a real server that can stall: while stalled it accepts
connections and reads nothing, forwards nothing, closes nothing, as a hung database server (or
a network that drops every packet) looks to its clients; resumed, everything flows again, what
was sent meanwhile included. It can also go ``down``: every connection dropped and each new one
closed at once, as a database server that stopped looks to its clients, until ``up``."""

import select
import socket
import threading
from types import TracebackType


class StallingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``(host, upstream_port)`` until ``stall``; ``resume``
    lets it flow again. A context manager; ``close`` drops every connection."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self.upstream = (host, upstream_port)
        self._flowing = threading.Event()
        self._flowing.set()
        self._down = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def down(self) -> None:
        """Drop every connection and close each new one at once, until ``up``."""
        self._down.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:  # each pump then ends, shutting down its pair
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def up(self) -> None:
        self._down.clear()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                client.close()
                continue
            self._keep(client)
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._wait_flowing()  # a stalled server answers no new connection either
        if self._closed.is_set():
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self._keep(upstream)
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _wait_flowing(self) -> None:
        while not self._closed.is_set() and not self._flowing.wait(0.05):
            pass

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                self._wait_flowing()
                readable, _, _ = select.select([source], [], [], 0.05)
                if not readable or not self._flowing.is_set():
                    continue  # what arrived stays unread while stalled
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def __enter__(self) -> "StallingProxy":
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()
