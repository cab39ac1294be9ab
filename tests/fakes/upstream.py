"""A fake provider upstream: a real HTTP server on 127.0.0.1, in a thread, that speaks the
wire formats of the providers ragmux calls.

Each route has a name (``openai.embeddings``, ``ollama.embed``, ``gemini.embed``,
``gemini.batch_embed``, ...) and knobs set with :meth:`FakeUpstream.configure`:

- ``latency``: seconds to wait before answering (a slow first byte); a caller that hangs up
  meanwhile gets no answer and is counted (see :meth:`wait_for_disconnects`);
- ``status`` / ``times``: answer that HTTP status (``times`` calls, or always when ``None``);
- ``width``: width of the vectors returned; ``wrong_width``: the last vector of a batch is
  one wider than the others;
- ``omit_usage``: leave the token usage out of the reply;
- ``malformed``: ``"not_json"`` or ``"wrong_shape"``;
- ``redirect_to``: answer 307 to that URL;
- ``stall_after``: a streamed chat answer stops sending (without closing) after that many
  chunks, until the caller hangs up (counted, see :meth:`wait_for_disconnects`) or the fake
  is stopped;
- ``error_after``: a streamed chat answer sends the provider's mid-stream error event after
  that many chunks;
- ``reset_after``: a streamed chat answer's connection is reset (a TCP RST, not a clean end)
  after that many chunks;
- ``chunk_interval``: seconds a streamed chat answer waits between two of its chunks (a long
  answer that keeps coming);
- ``tool_call``: the chat answer is a call of the function of that name with
  :data:`TOOL_ARGUMENTS` (OpenAI's too, whole or streamed);
- ``error_reason``: Gemini's error details carry this reason (``API_KEY_INVALID``).
- ``error_message``: a failure's message says this instead of ``fake upstream failure <status>``
  (an upstream that echoes a credential).
- ``prompt_cache``: ``(read, written)``: the chat usage says that many prompt tokens were read
  from and written to the provider's prompt cache, each in the provider's own fields (OpenAI
  and Gemini report reads only).
- ``deepseek_cache_hits``: the OpenAI chat usage counts that many prompt-cache hits in DeepSeek's
  own fields;
- ``answer``: the text of a chat answer, in any provider's format, whole or streamed;
- ``omit_finish``: a streamed OpenAI chat answer ends without its finishing chunk;
- ``rerank_results``: the indices a rerank route answers with (see ``tests.fakes.rerank``).

Failures (``status``) answer in the route's provider's own error format.

:attr:`on_request`, when set, is called with each recorded request before it is answered (a
test can make a request stall, or kill the process that sent it).

Every request is recorded (:attr:`requests`) and counted per route (:meth:`calls`). The rerank
routes (``cohere.rerank``, ``voyage.rerank``) are in ``tests.fakes.rerank``, the Azure OpenAI ones
(``azure.chat``, ``azure.v1_chat``, ...) in ``tests.fakes.azure``. The chat routes
(``openai.chat``, ``anthropic.messages``, ``gemini.generate``, ``gemini.stream``, ``ollama.chat``) answer
:data:`CHAT_ANSWER` (:data:`JSON_ANSWER` when asked for JSON) in their provider's format, whole
or streamed (a handler may return an iterator of byte pieces, written and flushed one by one),
cut to the request's token limit (one word a token) with the provider's "length" finish reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.fakes.azure import register_azure_routes
from tests.fakes.rerank import RERANK_PROMPT_MARK, register_rerank_routes, rerank_prompt_numbers

STALL = b""  # yielded by a streamed reply: send nothing more and wait for the caller to hang up
RESET = b"\x00reset"  # yielded by a streamed reply: abort the connection (a TCP reset) mid-answer
Reply = tuple[int, dict[str, str], bytes | Iterator[bytes]]
CHAT_ANSWER = "The launch code is AMBER-7731, according to the context."
TOOL_ARGUMENTS = {"query": "launch code", "limit": 3}
# The answer to a chat that asks for JSON (a response format, a JSON mime type or Ollama's format).
JSON_ANSWER = '{"code": "AMBER-7731", "source": "handbook"}'


@dataclass
class Knobs:
    latency: float = 0.0
    status: int | None = None
    times: int | None = None
    width: int = 8
    wrong_width: bool = False
    omit_usage: bool = False
    # A streamed OpenAI chat answer never sends its finishing chunk (no `finish_reason`).
    omit_finish: bool = False
    malformed: str | None = None
    redirect_to: str | None = None
    stall_after: int | None = None
    error_after: int | None = None
    # A streamed answer's connection is reset (not closed cleanly) after this many frames.
    reset_after: int | None = None
    chunk_interval: float = 0.0
    tool_call: str | None = None
    error_reason: str | None = None
    # The text of a failure's message, in place of the default one.
    error_message: str | None = None
    # Sent as `Retry-After` with a failure: seconds, or an HTTP-date.
    retry_after: int | str | None = None
    prompt_cache: tuple[int, int] | None = None
    # The OpenAI chat usage also counts this many prompt tokens as cache hits the way DeepSeek
    # does (`prompt_cache_hit_tokens`, `prompt_cache_miss_tokens`), with no `prompt_tokens_details`.
    deepseek_cache_hits: int | None = None
    # The text of a chat answer (any provider's), whole or streamed, instead of CHAT_ANSWER (or of
    # a rerank answer).
    answer: str | None = None
    # The indices a rerank route answers with, in order (duplicates and out-of-range ones are sent
    # as given); None: every document in reverse order, cut to the request's top_n / top_k.
    rerank_results: list[int] | None = None


@dataclass
class RecordedRequest:
    route: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int = 0
    # When it arrived (time.monotonic()).
    received: float = 0.0

    def json(self):
        return json.loads(self.body)


@dataclass
class _Route:
    name: str
    method: str
    pattern: re.Pattern
    handler: Callable[[FakeUpstream, object, re.Match, Knobs], Reply]
    # The body of a failure with this status, in the route's provider's format.
    error_body: Callable[[int, Knobs], object]


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A client that hangs up early (a size cap, a timeout) is part of what is tested.
        pass


def fake_vector(text: str, width: int) -> list[float]:
    """A deterministic unit vector for ``text``: equal texts give equal vectors."""
    seed = hashlib.sha256(text.encode()).digest()
    values = []
    counter = 0
    while len(values) < width:
        block = hashlib.sha256(seed + counter.to_bytes(4, "big")).digest()
        values.extend((b - 127.5) / 127.5 for b in block)
        counter += 1
    values = values[:width]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def json_reply(body: object, status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


def failure_message(status: int, knobs: Knobs) -> str:
    return knobs.error_message or f"fake upstream failure {status}"


def openai_error(status: int, knobs: Knobs) -> object:
    return {"error": {"message": failure_message(status, knobs)}}


class FakeUpstream:
    def __init__(self) -> None:
        self._routes: list[_Route] = []
        self._knobs: dict[str, Knobs] = {}
        self._failures_left: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._counts: Counter[str] = Counter()
        self.embedder: Callable[[str, int], list[float]] = fake_vector
        self.on_request: Callable[[RecordedRequest], None] | None = None
        self.stopping = threading.Event()
        # The request being answered, per server thread: for a handler that checks its headers
        # or query (tests.fakes.azure).
        self.current = threading.local()
        self._disconnects = 0
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        _register_embedding_routes(self)
        _register_chat_routes(self)
        _register_anthropic_routes(self)
        _register_gemini_routes(self)
        _register_ollama_routes(self)
        register_rerank_routes(self)
        register_azure_routes(self)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- knobs and counters ----------------------------------------------------------------
    def configure(self, route: str, **knobs) -> None:
        with self._lock:
            current = self._knobs.get(route, Knobs())
            for name, value in knobs.items():
                if not hasattr(current, name):
                    raise TypeError(f"unknown knob {name!r}")
                setattr(current, name, value)
            self._knobs[route] = current
            self._failures_left[route] = current.times

    def forget_requests(self) -> None:
        """Starts the counters and the request log afresh (knobs stay)."""
        with self._lock:
            self.requests.clear()
            self._counts.clear()

    def knobs(self, route: str) -> Knobs:
        with self._lock:
            return self._knobs.get(route, Knobs())

    def calls(self, route: str | None = None) -> int:
        with self._lock:
            return sum(self._counts.values()) if route is None else self._counts[route]

    def inputs(self, route: str = "openai.embeddings") -> list[str]:
        """Every text sent to an OpenAI-style embeddings route, in arrival order."""
        return [text for request in self.requests_to(route) for text in request.json()["input"]]

    def wait_for_disconnects(self, count: int, timeout: float = 5) -> bool:
        """True once ``count`` callers have hung up on a stalled stream or a slow first byte."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._disconnects >= count:
                    return True
            time.sleep(0.02)
        return False

    def _hung_up(self) -> None:
        with self._lock:
            self._disconnects += 1

    def requests_to(self, route: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.route == route]

    def route(self, name: str, method: str, pattern: str, error_body: Callable[[int, Knobs], object] | None = None):
        def register(handler):
            self._routes.append(_Route(name, method, re.compile(pattern), handler, error_body or openai_error))
            return handler

        return register

    # -- dispatch --------------------------------------------------------------------------
    def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        client_port: int,
        hangs_up_within: Callable[[float], bool],
    ) -> Reply | None:
        """The reply to a request; None when its caller hung up before it was due."""
        for route in self._routes:
            match = route.pattern.fullmatch(path.split("?", 1)[0])
            if route.method != method or not match:
                continue
            request = RecordedRequest(route.name, method, path, headers, body, client_port, time.monotonic())
            with self._lock:
                self.requests.append(request)
                self._counts[route.name] += 1
                knobs = self._knobs.get(route.name, Knobs())
                fail = knobs.status is not None and self._failures_left.get(route.name) != 0
                if fail and self._failures_left.get(route.name) is not None:
                    self._failures_left[route.name] -= 1
            self.current.request = request
            if self.on_request is not None:
                self.on_request(request)
            if knobs.latency and hangs_up_within(knobs.latency):
                return None
            if knobs.redirect_to:
                return 307, {"Location": knobs.redirect_to}, b""
            if fail:
                status, headers, content = json_reply(route.error_body(knobs.status, knobs), knobs.status)
                if knobs.retry_after is not None:
                    headers["Retry-After"] = str(knobs.retry_after)
                return status, headers, content
            if knobs.malformed == "not_json":
                return 200, {"Content-Type": "application/json"}, b"{this is not json"
            try:
                payload = json.loads(body) if body else {}
            except ValueError:
                return json_reply({"error": {"message": "request body is not JSON"}}, 400)
            return route.handler(self, payload, match, knobs)
        return json_reply({"error": {"message": f"no fake route for {method} {path}"}}, 404)

    def _handler_class(self):
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = upstream._dispatch(
                    self.command, self.path, headers, body, self.client_address[1], self._hangs_up_within
                )
                if answer is None:
                    self.close_connection = True
                    return
                status, reply_headers, reply = answer
                self.send_response(status)
                for name, value in reply_headers.items():
                    self.send_header(name, value)
                if isinstance(reply, bytes):
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                    return
                # A stream: delimited by closing the connection.
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for piece in reply:
                    if piece == STALL:
                        self._hangs_up_within(None)
                        return
                    if piece == RESET:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.connection.close()
                        return
                    self.wfile.write(piece)
                    self.wfile.flush()

            def _hangs_up_within(self, seconds: float | None) -> bool:
                """Waits ``seconds`` (None: until the fake stops) for the caller to hang up; True
                (and counted) when it did."""
                deadline = None if seconds is None else time.monotonic() + seconds
                while not upstream.stopping.is_set() and (deadline is None or time.monotonic() < deadline):
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                        upstream._hung_up()
                        return True
                return False

            do_GET = do_POST = _serve

            def log_message(self, *args) -> None:
                pass

        return Handler


def _vectors(upstream: FakeUpstream, texts: list[str], knobs: Knobs) -> list[list[float]]:
    vectors = [upstream.embedder(text, knobs.width) for text in texts]
    if knobs.wrong_width and vectors:
        vectors[-1] = vectors[-1] + [0.0]
    return vectors


def _tokens(texts: list[str]) -> int:
    return sum(len(t.split()) for t in texts)


def openai_embeddings(up: FakeUpstream, payload: dict, match, knobs: Knobs) -> Reply:
    """An OpenAI ``/embeddings`` answer (its items in reverse order, each with its index)."""
    texts = payload.get("input")
    texts = [texts] if isinstance(texts, str) else list(texts or [])
    if knobs.malformed == "wrong_shape":
        return json_reply({"object": "list", "results": []})
    vectors = _vectors(up, texts, knobs)
    reply = {
        "object": "list",
        "model": payload.get("model"),
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in reversed(list(enumerate(vectors)))],
    }
    if not knobs.omit_usage:
        reply["usage"] = {"prompt_tokens": _tokens(texts), "total_tokens": _tokens(texts)}
    return json_reply(reply)


def _register_embedding_routes(upstream: FakeUpstream) -> None:
    upstream.route("openai.embeddings", "POST", r"/v1/embeddings")(openai_embeddings)

    @upstream.route("ollama.embed", "POST", r"/api/embed")
    def ollama_embed(up, payload, match, knobs):
        texts = payload.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        if knobs.malformed == "wrong_shape":
            return json_reply({"model": payload.get("model"), "embedding": []})
        reply = {"model": payload.get("model"), "embeddings": _vectors(up, texts, knobs)}
        if not knobs.omit_usage:
            reply["prompt_eval_count"] = _tokens(texts)
        return json_reply(reply)

    @upstream.route("gemini.embed", "POST", r"/v1beta/models/(?P<model>[^/:]+):embedContent")
    def gemini_embed(up, payload, match, knobs):
        text = payload["content"]["parts"][0]["text"]
        if knobs.malformed == "wrong_shape":
            return json_reply({"embeddings": []})
        return json_reply({"embedding": {"values": _vectors(up, [text], knobs)[0]}})

    @upstream.route("gemini.batch_embed", "POST", r"/v1beta/models/(?P<model>[^/:]+):batchEmbedContents")
    def gemini_batch(up, payload, match, knobs):
        texts = [r["content"]["parts"][0]["text"] for r in payload.get("requests", [])]
        if knobs.malformed == "wrong_shape":
            return json_reply({"embedding": {"values": []}})
        return json_reply({"embeddings": [{"values": v} for v in _vectors(up, texts, knobs)]})


def _chat_usage(payload: dict, knobs: Knobs, completion: int = len(CHAT_ANSWER.split())) -> dict:
    prompt = sum(len(str(m.get("content", "")).split()) for m in payload.get("messages", []))
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if knobs.prompt_cache:
        usage["prompt_tokens_details"] = {"cached_tokens": knobs.prompt_cache[0]}
    if knobs.deepseek_cache_hits is not None:
        usage["prompt_cache_hit_tokens"] = knobs.deepseek_cache_hits
        usage["prompt_cache_miss_tokens"] = prompt - knobs.deepseek_cache_hits
    return usage


def _openai_answer(payload: dict, knobs: Knobs) -> tuple[str, bool]:
    """The ``answer`` knob, else a rerank prompt's passage numbers in reverse order (as the
    original's e2e mock answers), else CHAT_ANSWER cut to the request's token limit (either
    name OpenAI's format has for it); True when it was cut."""
    if knobs.answer is not None:
        return knobs.answer, False
    if any(RERANK_PROMPT_MARK in text for text in _texts(payload.get("messages"))):
        return json.dumps(list(reversed(rerank_prompt_numbers(payload)))), False
    words, cut = _answer_words(payload, payload.get("max_completion_tokens", payload.get("max_tokens")), knobs)
    return " ".join(words), cut


def openai_chat(up: FakeUpstream, payload: dict, match, knobs: Knobs) -> Reply:
    """An OpenAI chat answer, whole or streamed."""
    base = {"id": "chatcmpl-fake", "created": 1700000000, "model": payload.get("model")}
    if knobs.tool_call:
        return _openai_tool_call(payload, knobs, base)
    answer, cut = _openai_answer(payload, knobs)
    finish_reason = "length" if cut else "stop"
    usage = _chat_usage(payload, knobs, len(answer.split()))
    if not payload.get("stream"):
        reply = {
            **base,
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish_reason}
            ],
        }
        if not knobs.omit_usage:
            reply["usage"] = usage
        return json_reply(reply)

    def frame(choices: list, **extra) -> bytes:
        body = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n".encode()

    deltas = [{"role": "assistant", "content": ""}] + [{"content": piece} for piece in _pieces(answer.split(" "))]
    frames = [frame([{"index": 0, "delta": delta, "finish_reason": None}]) for delta in deltas]
    if not knobs.omit_finish:
        frames.append(frame([{"index": 0, "delta": {}, "finish_reason": finish_reason}]))
    if (payload.get("stream_options") or {}).get("include_usage") and not knobs.omit_usage:
        frames.append(frame([], usage=usage))
    frames.append(b"data: [DONE]\n\n")
    error = _sse(openai_error(500, knobs))
    return 200, {"Content-Type": "text/event-stream"}, _stream_events(frames, knobs, error)


def _openai_tool_call(payload: dict, knobs: Knobs, base: dict) -> Reply:
    """An OpenAI chat answer calling the ``tool_call`` knob's function with TOOL_ARGUMENTS, whole
    or streamed (the arguments in two pieces, as OpenAI splits them)."""
    arguments = json.dumps(TOOL_ARGUMENTS)
    call = {"id": "call_fake1", "type": "function", "function": {"name": knobs.tool_call, "arguments": arguments}}
    usage = _chat_usage(payload, knobs)
    if not payload.get("stream"):
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return json_reply({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
    half = len(arguments) // 2
    pieces = (arguments[:half], arguments[half:])
    opening = {**call, "index": 0, "function": {"name": knobs.tool_call, "arguments": ""}}
    deltas = [{"role": "assistant", "content": None, "tool_calls": [opening]}] + [
        {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in pieces
    ]
    chunks = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
    chunks.append({"index": 0, "delta": {}, "finish_reason": "tool_calls"})
    frames = [{**base, "object": "chat.completion.chunk", "choices": [chunk]} for chunk in chunks]
    frames.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    encoded = [f"data: {json.dumps(frame)}\n\n".encode() for frame in frames] + [b"data: [DONE]\n\n"]
    return 200, {"Content-Type": "text/event-stream"}, iter(encoded)


def _register_chat_routes(upstream: FakeUpstream) -> None:
    upstream.route("openai.chat", "POST", r"/v1/chat/completions")(openai_chat)


# --------------------------------------------------------------------------------------------
# Chat in each provider's own wire format
# --------------------------------------------------------------------------------------------


def _texts(node: object) -> Iterator[str]:
    """Every text of a request body, whatever the provider's shape."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("text", "content", "system") and isinstance(value, str):
                yield value
            else:
                yield from _texts(value)
    elif isinstance(node, list):
        for item in node:
            yield from _texts(item)


def _prompt_words(payload: dict) -> int:
    return sum(len(text.split()) for text in _texts(payload))


def _asks_json(payload: dict) -> bool:
    """Whether a chat request asks for a JSON answer, in its provider's words: OpenAI's
    `response_format`, Gemini's `responseMimeType`, Ollama's `format`."""
    response_format = payload.get("response_format")
    config = payload.get("generationConfig")
    return (
        (isinstance(response_format, dict) and str(response_format.get("type")).startswith("json"))
        or (isinstance(config, dict) and config.get("responseMimeType") == "application/json")
        or bool(payload.get("format"))
    )


def _answer_words(payload: dict, limit: object, knobs: Knobs) -> tuple[list[str], bool]:
    """The answer's words (the ``answer`` knob's, else JSON_ANSWER's when the request asks for
    JSON, else CHAT_ANSWER's), cut to ``limit`` (one word a token); True when it was cut."""
    if knobs.answer is not None:
        words = knobs.answer.split(" ")
    else:
        words = (JSON_ANSWER if _asks_json(payload) else CHAT_ANSWER).split(" ")
    if isinstance(limit, int) and limit < len(words):
        return words[:limit], True
    return words, False


def _pieces(words: list[str]) -> list[str]:
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def _stream_events(frames: list[bytes], knobs: Knobs, error_frame: bytes) -> Iterator[bytes]:
    for sent, frame in enumerate(frames):
        if sent and knobs.chunk_interval:
            time.sleep(knobs.chunk_interval)
        if knobs.stall_after is not None and sent == knobs.stall_after:
            yield STALL
            return
        if knobs.reset_after is not None and sent == knobs.reset_after:
            yield RESET
            return
        if knobs.error_after is not None and sent == knobs.error_after:
            yield error_frame
            return
        yield frame


def _sse(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, knobs: Knobs) -> object:
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": failure_message(status, knobs)}}


def _register_anthropic_routes(upstream: FakeUpstream) -> None:
    @upstream.route("anthropic.messages", "POST", r"/v1/messages", error_body=anthropic_error)
    def messages(up, payload, match, knobs):
        words, cut = _answer_words(payload, payload.get("max_tokens"), knobs)
        usage = {"input_tokens": _prompt_words(payload), "output_tokens": len(words)}
        read, written = knobs.prompt_cache or (2, 0)
        usage.update(cache_creation_input_tokens=written, cache_read_input_tokens=read)
        stop = "max_tokens" if cut else "end_turn"
        if knobs.tool_call:
            blocks = [{"type": "tool_use", "id": "toolu_fake1", "name": knobs.tool_call, "input": TOOL_ARGUMENTS}]
            stop = "tool_use"
        else:
            blocks = [{"type": "text", "text": " ".join(words)}]
        message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": payload.get("model")}
        if not payload.get("stream"):
            reply = {**message, "content": blocks, "stop_reason": stop, "stop_sequence": None}
            if not knobs.omit_usage:
                reply["usage"] = usage
            return json_reply(reply)
        frames = [
            _sse(
                {
                    "type": "message_start",
                    "message": {**message, "content": [], "usage": {**usage, "output_tokens": 1}},
                },
                "message_start",
            ),
            _sse({"type": "ping"}, "ping"),
        ]
        if knobs.tool_call:
            start = {**blocks[0], "input": {}}
            arguments = json.dumps(TOOL_ARGUMENTS)
            frames.append(
                _sse({"type": "content_block_start", "index": 0, "content_block": start}, "content_block_start")
            )
            for fragment in (arguments[:10], arguments[10:]):
                delta = {"type": "input_json_delta", "partial_json": fragment}
                frames.append(_sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"))
        else:
            start = {"type": "text", "text": ""}
            frames.append(
                _sse({"type": "content_block_start", "index": 0, "content_block": start}, "content_block_start")
            )
            for piece in _pieces(words):
                delta = {"type": "text_delta", "text": piece}
                frames.append(_sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"))
        frames.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        final = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
        if not knobs.omit_usage:
            # The input and cache counts came with `message_start` only.
            final["usage"] = {"output_tokens": len(words)}
        frames += [_sse(final, "message_delta"), _sse({"type": "message_stop"}, "message_stop")]
        error = _sse(anthropic_error(529, knobs), "error")
        return 200, {"Content-Type": "text/event-stream"}, _stream_events(frames, knobs, error)


GEMINI_STATUSES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def gemini_error(status: int, knobs: Knobs) -> object:
    error = {
        "code": status,
        "message": failure_message(status, knobs),
        "status": GEMINI_STATUSES.get(status, "UNKNOWN"),
    }
    if knobs.error_reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": knobs.error_reason}]
    return {"error": error}


def _gemini_reply(payload: dict, knobs: Knobs, parts: list[dict], finish: str | None, usage: bool) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    reply = {"candidates": [candidate], "modelVersion": "gemini-fake", "responseId": "gemini-fake-id"}
    if usage and not knobs.omit_usage:
        prompt, answer = _prompt_words(payload), len(CHAT_ANSWER.split())
        reply["usageMetadata"] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": answer,
            "thoughtsTokenCount": 2,
            "cachedContentTokenCount": knobs.prompt_cache[0] if knobs.prompt_cache else 1,
            "totalTokenCount": prompt + answer + 2,
        }
    return reply


def _register_gemini_routes(upstream: FakeUpstream) -> None:
    def answer(payload: dict, knobs: Knobs) -> tuple[list[list[dict]], str]:
        """The parts of each streamed event, and the finish reason."""
        if knobs.tool_call:
            return [[{"functionCall": {"name": knobs.tool_call, "args": TOOL_ARGUMENTS}}]], "STOP"
        words, cut = _answer_words(payload, (payload.get("generationConfig") or {}).get("maxOutputTokens"), knobs)
        thought = [{"text": "Thinking about the context.", "thought": True}]
        return [thought] + [[{"text": piece}] for piece in _pieces(words)], "MAX_TOKENS" if cut else "STOP"

    @upstream.route("gemini.generate", "POST", r"/v1beta/models/(?P<model>[^/:]+):generateContent", gemini_error)
    def generate(up, payload, match, knobs):
        events, finish = answer(payload, knobs)
        parts = [part for event in events for part in event]
        if not knobs.tool_call:
            # A whole reply holds the answer in one text part (beside the thought).
            parts = [parts[0], {"text": "".join(p["text"] for p in parts[1:])}]
        return json_reply(_gemini_reply(payload, knobs, parts, finish, usage=True))

    @upstream.route("gemini.stream", "POST", r"/v1beta/models/(?P<model>[^/:]+):streamGenerateContent", gemini_error)
    def stream(up, payload, match, knobs):
        events, finish = answer(payload, knobs)
        frames = [
            _sse(_gemini_reply(payload, knobs, parts, finish if last else None, usage=last))
            for last, parts in ((i == len(events) - 1, parts) for i, parts in enumerate(events))
        ]
        error = _sse(gemini_error(503, knobs))
        return 200, {"Content-Type": "text/event-stream"}, _stream_events(frames, knobs, error)


def ollama_error(status: int, knobs: Knobs) -> object:
    return {"error": failure_message(status, knobs)}


def _register_ollama_routes(upstream: FakeUpstream) -> None:
    @upstream.route("ollama.chat", "POST", r"/api/chat", error_body=ollama_error)
    def chat(up, payload, match, knobs):
        words, cut = _answer_words(payload, (payload.get("options") or {}).get("num_predict"), knobs)
        base = {"model": payload.get("model"), "created_at": "2025-01-01T00:00:00Z"}
        final = {**base, "done": True, "done_reason": "length" if cut else "stop"}
        if not knobs.omit_usage:
            final.update(prompt_eval_count=_prompt_words(payload), eval_count=len(words))
        # As Ollama does, a model can only call a tool it was sent.
        offered = [tool.get("function", {}).get("name") for tool in payload.get("tools") or []]
        calls_tool = knobs.tool_call is not None and knobs.tool_call in offered
        if calls_tool:
            calls = [{"function": {"name": knobs.tool_call, "arguments": TOOL_ARGUMENTS}}]
            messages = [{"role": "assistant", "content": "", "tool_calls": calls}]
        else:
            messages = [{"role": "assistant", "content": piece} for piece in _pieces(words)]
        if payload.get("stream") is False:
            whole = {"role": "assistant", "content": "".join(m["content"] for m in messages)}
            if calls_tool:
                whole["tool_calls"] = messages[0]["tool_calls"]
            return json_reply({**final, "message": whole})
        lines = [json.dumps({**base, "message": m, "done": False}).encode() + b"\n" for m in messages]
        lines.append(json.dumps({**final, "message": {"role": "assistant", "content": ""}}).encode() + b"\n")
        error = json.dumps({"error": "fake upstream failure mid-stream"}).encode() + b"\n"
        return 200, {"Content-Type": "application/x-ndjson"}, _stream_events(lines, knobs, error)
