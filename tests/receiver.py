"""A real HTTP receiver on loopback for webhook tests: records every request, answers with
scripted status codes (then 200)."""

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    script: deque[tuple[int, dict[str, str], bytes]] = field(default_factory=deque)
    delay: float = 0.0  # seconds to wait before answering each request

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def answer(
        self, status: int, headers: dict[str, str] | None = None, body: bytes = b"", times: int = 1
    ) -> None:
        """Answer the next ``times`` requests with ``status`` (later ones get 200)."""
        for _ in range(times):
            self.script.append((status, headers or {}, body))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class LoopbackServer(ThreadingHTTPServer):
    """The tests' webhook receivers' server: a thread per request, and a backlog as a real
    server's (uvicorn's is 2048), not socketserver's 5. The worker opens up to a batch of
    connections at once; a connection dropped by a full backlog is tried again by the client's
    TCP only after a second, past a test worker's send timeout (half its lease), so whole
    batches failed as timeouts on a busy machine."""

    request_queue_size = 1024
    daemon_threads = True


def start_receiver() -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            receiver.requests.append(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            time.sleep(receiver.delay)
            status, headers, reply = (
                receiver.script.popleft() if receiver.script else (200, {}, b"ok")
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            return

    server = LoopbackServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


def deal_events(receiver: Receiver, kind: str, deal_id: str) -> list[dict[str, Any]]:
    """The ``kind`` webhooks the receiver got about the deal, in the deal's order
    (``deal_sequence``: a batch is delivered concurrently, so they may arrive out of order)."""
    bodies = [json.loads(r.body) for r in list(receiver.requests)]
    ours = [b for b in bodies if b["event"] == kind and b["data"]["dealId"] == deal_id]
    return sorted(ours, key=lambda b: b["deal_sequence"])
