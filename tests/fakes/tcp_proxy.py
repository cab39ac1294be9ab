"""A TCP proxy on 127.0.0.1, in a thread, in front of a real server (the suite's PostgreSQL),
that can play the server going away and coming back:

- :meth:`TcpProxy.refuse`: the listener closes and every open connection is dropped, as when the
  server is stopped: new connections are refused;
- :meth:`TcpProxy.hang`: new connections are accepted and not answered, as when the server's
  listening process is stopped with SIGSTOP (the connections it already served keep working);
- :meth:`TcpProxy.freeze`: as a hang, and the open connections carry nothing either way (kept
  open), as when every process of the server is stopped with SIGSTOP;
- :meth:`TcpProxy.forward`: back to normal; the connections accepted meanwhile are served now,
  as a server continued with SIGCONT serves its backlog, and what the frozen ones held flows on.
"""

from __future__ import annotations

import asyncio
import threading

from ragmux.launch.embedded import free_port

PUMP_BYTES = 65536


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        # Set while forwarding: a connection accepted during a hang waits for it.
        self._forwarding = asyncio.Event()
        # Set unless frozen: the open connections' bytes wait for it.
        self._flowing = asyncio.Event()
        # Every open stream of both sides, so that refusing can drop them all.
        self._streams: set[asyncio.StreamWriter] = set()

    def start(self) -> TcpProxy:
        self._thread.start()
        self.forward()
        return self

    def stop(self) -> None:
        self._call(self._shut_down())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def refuse(self) -> None:
        self._call(self._close_all())

    def hang(self) -> None:
        self._call(self._listen(forwarding=False))

    def freeze(self) -> None:
        self._call(self._listen(forwarding=False, flowing=False))

    def forward(self) -> None:
        self._call(self._listen(forwarding=True))

    def _call(self, coroutine) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _listen(self, *, forwarding: bool, flowing: bool = True) -> None:
        for event, on in ((self._forwarding, forwarding), (self._flowing, flowing)):
            if on:
                event.set()
            else:
                event.clear()
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _close_all(self) -> None:
        self._forwarding.clear()
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._streams):
            writer.transport.abort()
        self._streams.clear()

    async def _shut_down(self) -> None:
        await self._close_all()
        # The connections waiting for the server wake up, find themselves dropped and end, as do
        # the pumps of the dropped ones, before the loop stops.
        self._forwarding.set()
        self._flowing.set()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._streams.add(client_writer)
        await self._forwarding.wait()
        if client_writer.is_closing():  # dropped by refuse() meanwhile
            return
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self._streams.add(server_writer)
        await asyncio.gather(self._pump(client_reader, server_writer), self._pump(server_reader, client_writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(PUMP_BYTES):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()
            self._streams.discard(writer)
