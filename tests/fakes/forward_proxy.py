"""A forward HTTP proxy on 127.0.0.1, in a thread, as HTTP_PROXY names one: it takes requests
in absolute form (`POST http://host:port/path HTTP/1.1`), sends each to its host in origin form
and relays the answer, noting the `host:port` of every request it carried.

Each connection carries one request (the answer says `Connection: close`), which keeps the proxy
a plain relay; plain http only, no CONNECT.
"""

from __future__ import annotations

import asyncio
import threading
from urllib.parse import urlsplit

from ragmux.launch.embedded import free_port

PUMP_BYTES = 65536


def _closing(head: bytes) -> bytes:
    """``head`` (header lines ending with the blank line) saying `Connection: close` instead of
    whatever it said about the connection."""
    lines = [line for line in head.split(b"\r\n") if line and not line.lower().startswith((b"connection:", b"proxy-"))]
    return b"\r\n".join([*lines, b"Connection: close", b"", b""])


class ForwardProxy:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.carried: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="forward-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> ForwardProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            head = await client_reader.readuntil(b"\r\n\r\n")
            request_line, _, headers = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ")
            url = urlsplit(target)
            self.carried.append(f"{url.hostname}:{url.port}")
            server_reader, server_writer = await asyncio.open_connection(url.hostname, url.port)
            path = url.path + (f"?{url.query}" if url.query else "")
            server_writer.write(f"{method} {path} {version}\r\n".encode("latin-1") + _closing(headers))
            # The request's body goes on while the answer comes back.
            body = asyncio.create_task(self._pump(client_reader, server_writer))
            try:
                client_writer.write(await self._answer_head(server_reader))
                await self._pump(server_reader, client_writer)
            finally:
                body.cancel()
                server_writer.transport.abort()
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            client_writer.transport.abort()

    @staticmethod
    async def _answer_head(reader: asyncio.StreamReader) -> bytes:
        return _closing(await reader.readuntil(b"\r\n\r\n"))

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(PUMP_BYTES):
            writer.write(data)
            await writer.drain()
