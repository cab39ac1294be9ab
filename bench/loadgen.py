"""The load generator of bench/gateway.py, in a process of its own: a raw asyncio HTTP/1.1
keep-alive client on uvloop.

    python bench/loadgen.py < plan.json > results.json

httpx spends about a millisecond of CPU on each call; on two cores shared with the server,
the upstream and the database, that made the client the bottleneck of the 50-client run. Here
a call is one write of a prepared request and a parse of the answer's head and framing
(Content-Length or chunked), nothing more.

The plan names the targets (host, port, path, bearer key, request body) and the counts; the
phases run in turn, each on every target before the next phase:

- ``latency``: sequential JSON calls on one connection (after a warm-up), the whole call timed;
- ``ttfb``: sequential streamed calls on one connection, timed to the first byte of the body;
- ``throughput``: ``clients`` connections (opened before the clock starts) calling in a loop for
  ``seconds``: answers 200 per second, and the other outcomes by reason; and, when the plan names
  the processes to ``watch`` (the server's pid, the database's postmaster pid), the CPU time each
  spent per answered call. On a machine shared with other work, requests per second move with
  what the others leave of the cores; the CPU a call costs moves much less, so it is what two
  versions of the code are best compared by;
- ``streams``: ``streams`` clients at once, each on a connection it opens then (the connect is
  part of its first-byte time): how many streams ended with ``data: [DONE]``, why the others did
  not, and the first-byte times.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

import psutil
import uvloop

WARM_UP = 20
DONE = b"data: [DONE]\n\n"
CALL_TIMEOUT = 120


class Refused(Exception):
    """The answer was not a 200."""


@dataclass
class Answer:
    status: int
    first_byte: float  # perf_counter when the first byte of the body arrived
    body: bytes


class Connection:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def call(self, request: bytes) -> Answer:
        if self.writer is None:
            await self.open()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_line.split(" ", 2)[1])
        if headers.get("transfer-encoding", "").lower() == "chunked":
            first_byte, body = await self._chunked()
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
            first_byte = time.perf_counter()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Answer(status, first_byte, body)

    async def _chunked(self) -> tuple[float, bytes]:
        first_byte, parts = 0.0, []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")  # no trailers: the empty line that ends the body
                return first_byte, b"".join(parts)
            data = (await self.reader.readexactly(size + 2))[:-2]
            if data and not first_byte:
                first_byte = time.perf_counter()
            parts.append(data)


def prepared(target: dict, *, stream: bool) -> bytes:
    body = json.dumps({**target["body"], "stream": stream}).encode()
    head = (
        f"POST {target['path']} HTTP/1.1\r\nHost: {target['host']}:{target['port']}\r\n"
        f"Authorization: Bearer {target['key']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _checked(connection: Connection, request: bytes) -> Answer:
    answer = await asyncio.wait_for(connection.call(request), CALL_TIMEOUT)
    if answer.status != 200:
        raise Refused(f"HTTP {answer.status}")
    return answer


async def latency(target: dict, count: int) -> list[float]:
    request = prepared(target, stream=False)
    connection = await Connection(target["host"], target["port"]).open()
    try:
        for _ in range(WARM_UP):
            await _checked(connection, request)
        timings = []
        for _ in range(count):
            started = time.perf_counter()
            await _checked(connection, request)
            timings.append((time.perf_counter() - started) * 1000)
        return timings
    finally:
        connection.close()


async def ttfb(target: dict, count: int) -> list[float]:
    request = prepared(target, stream=True)
    connection = await Connection(target["host"], target["port"]).open()
    try:
        for _ in range(WARM_UP // 2):
            await _checked(connection, request)
        timings = []
        for _ in range(count):
            started = time.perf_counter()
            answer = await _checked(connection, request)
            if not answer.body.endswith(DONE):
                raise Refused("incomplete stream")
            timings.append((answer.first_byte - started) * 1000)
        return timings
    finally:
        connection.close()


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, Refused) else type(exc).__name__


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) of the process, its threads and its children, the ones gone
    included (the database's backends: a backend that exits is added to its postmaster's)."""
    process = psutil.Process(pid)
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += child_times.user + child_times.system
    return total


def cpu_snapshot(watch: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in watch.items()}


async def throughput(target: dict, clients: int, seconds: float, watch: dict[str, int]) -> dict:
    request = prepared(target, stream=False)
    connections = await asyncio.gather(*(Connection(target["host"], target["port"]).open() for _ in range(clients)))
    done, failed = 0, Counter()

    async def client(connection: Connection, deadline: float) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            try:
                await _checked(connection, request)
                done += 1
            except Refused as exc:
                failed[_reason(exc)] += 1
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                failed[_reason(exc)] += 1
                connection.close()  # reopened by the next call

    cpu_before = cpu_snapshot(watch)
    started = time.perf_counter()
    await asyncio.gather(*(client(c, started + seconds) for c in connections))
    elapsed = time.perf_counter() - started
    cpu_after = cpu_snapshot(watch)
    for connection in connections:
        connection.close()
    result = {"requests_per_second": done / elapsed, "failed": failed.total(), "failures": dict(failed)}
    for name in watch:
        result[f"{name}_cpu_ms_per_call"] = (cpu_after[name] - cpu_before[name]) * 1000 / max(done, 1)
    return result


async def streams(target: dict, count: int) -> dict:
    request = prepared(target, stream=True)
    first_bytes: list[float] = []

    async def one() -> str:
        connection = Connection(target["host"], target["port"])
        started = time.perf_counter()
        try:
            answer = await asyncio.wait_for(connection.call(request), CALL_TIMEOUT)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            return _reason(exc)
        finally:
            connection.close()
        if answer.status != 200:
            return f"HTTP {answer.status}"
        first_bytes.append((answer.first_byte - started) * 1000)
        return "ok" if answer.body.endswith(DONE) else "incomplete"

    started = time.perf_counter()
    outcomes = Counter(await asyncio.gather(*(one() for _ in range(count))))
    return {
        "streams_ok": outcomes.pop("ok", 0),
        "streams_errors": dict(outcomes),
        "streams_seconds": time.perf_counter() - started,
        "streams_first_byte_ms": first_bytes,
    }


async def run(plan: dict) -> dict[str, dict]:
    results: dict[str, dict] = {name: {} for name in plan["targets"]}
    for phase in plan["phases"]:
        for name, target in plan["targets"].items():
            if phase not in target.get("phases", plan["phases"]):
                continue
            if phase == "latency":
                results[name]["latency_ms"] = await latency(target, plan["requests"])
            elif phase == "ttfb":
                results[name]["ttfb_ms"] = await ttfb(target, plan["requests"])
            elif phase == "throughput":
                watch = plan.get("watch", {})
                results[name].update(await throughput(target, plan["clients"], plan["seconds"], watch))
            elif phase == "streams":
                results[name].update(await streams(target, plan["streams"]))
    return results


if __name__ == "__main__":
    print(json.dumps(uvloop.run(run(json.load(sys.stdin)))))
