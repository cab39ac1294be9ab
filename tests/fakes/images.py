"""A fake image host: a real HTTP server on 127.0.0.1, in a thread, serving what a test puts
at a path (:meth:`FakeImageHost.serve`) and recording the path of every request it gets.

The gateway never reaches loopback for an image URL; a test names this host by a stand-in
name that the test settings resolve to 127.0.0.1 (``IMAGE_FETCH_TEST_RESOLVER``), or by its
loopback address when the point is that the gateway must not reach it.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def png(width: int = 1, height: int = 1) -> bytes:
    """A valid PNG of ``width`` × ``height`` black pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@dataclass
class Served:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds before the answer is sent.
    delay: float = 0.0
    # False: no Content-Length; the body ends when the connection closes.
    declare_length: bool = True


class FakeImageHost:
    """``name`` is the host its URLs name: its loopback address unless a test gives it a stand-in."""

    def __init__(self, name: str = "127.0.0.1") -> None:
        self.name = name
        self._served: dict[str, Served] = {}
        self._lock = threading.Lock()
        self.requests: list[str] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with host._lock:
                    host.requests.append(self.path)
                    served = host._served.get(self.path, Served(b"not found", status=404))
                time.sleep(served.delay)
                self.send_response(served.status)
                headers = {"Content-Length": str(len(served.body))} if served.declare_length else {}
                for name, value in {**headers, **served.headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(served.body)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> FakeImageHost:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://{self.name}:{self.port}{path}"

    def serve(self, path: str, served: Served) -> None:
        with self._lock:
            self._served[path] = served
