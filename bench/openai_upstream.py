"""A minimal OpenAI-format upstream for bench/gateway.py: asyncio, HTTP/1.1 keep-alive.

    python bench/openai_upstream.py PORT [--host ADDRESS] [--embed-latency-ms MS]   # until killed

`POST /v1/chat/completions` answers at once, as JSON or (``"stream": true``) as a chunked
server-sent event stream with the usage as its last event; `POST /v1/embeddings` answers
deterministic unit vectors of ``DIMENSIONS``, clustered by topic (``vector``). `POST
/v2/rerank` (Cohere's format) and `POST /v1/rerank` (Voyage's) rank the documents in reverse
order, the worst reranker there is,
so that bench/quality.py's reranked rows show the wiring moves the figures. Each answer,
headers and body, goes out in one write: in two, the second waits for the client's delayed ACK
(about 40 ms on Linux), an artefact that is not the gateway's. ``--embed-latency-ms`` holds every
embeddings answer that long, as a remote provider's batch would be (bench/scaleout.py). The suite's fake
(tests/fakes/upstream.py) starts a thread per connection, which on two shared cores made the
upstream alone the bottleneck of the bench.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json

import numpy as np
import uvloop
from search_latency import CLUSTER_SPREAD, DIMENSIONS

# The embeddings' topics; how far a text's vector lies from its topic's centre is
# search_latency's CLUSTER_SPREAD.
TOPICS = 200
ANSWER = ["The", " launch", " code", " is", " AMBER-7731", "."]
USAGE = {"prompt_tokens": 12, "completion_tokens": len(ANSWER), "total_tokens": 12 + len(ANSWER)}


def _head(status: str, content_type: str, length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode()


def json_answer(payload: object, status: str = "200 OK") -> bytes:
    body = json.dumps(payload).encode()
    return _head(status, "application/json", len(body)) + body


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def completion(model: str) -> bytes:
    return json_answer(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "".join(ANSWER)}, "finish_reason": "stop"}
            ],
            "usage": USAGE,
        }
    )


def stream(model: str) -> bytes:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": model}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    events += [{**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in ANSWER]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({**base, "choices": [], "usage": USAGE})
    frames = [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]
    return _head("200 OK", "text/event-stream", None) + b"".join(_chunk(f) for f in frames) + b"0\r\n\r\n"


@functools.cache
def _topic_centre(topic: int) -> np.ndarray:
    centre = np.random.default_rng(topic).standard_normal(DIMENSIONS)
    return centre / np.linalg.norm(centre)


def vector(text: str) -> list[float]:
    """A unit vector near one of ``TOPICS`` centres, chosen by the text's hash: embeddings of
    texts on one subject sit close together, as bench/search_latency.py models them. Uniformly
    random vectors, which this returned before, are unlike any model's, and made two workers'
    HNSW insertions slow each other by half (docs/benchmarks.md, "Scale-out")."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    noise = np.random.default_rng(seed).standard_normal(DIMENSIONS) * (CLUSTER_SPREAD / np.sqrt(DIMENSIONS))
    values = _topic_centre(seed % TOPICS) + noise
    return (values / np.linalg.norm(values)).tolist()


def embeddings(request: dict) -> bytes:
    texts = request.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    data = [{"object": "embedding", "index": n, "embedding": vector(t)} for n, t in enumerate(texts)]
    tokens = sum(len(t) // 4 + 1 for t in texts)
    return json_answer(
        {
            "object": "list",
            "data": data,
            "model": "bench-embed",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def reversed_ranking(request: dict, results_field: str, usage: dict) -> bytes:
    count = len(request.get("documents") or [])
    ranking = [{"index": index, "relevance_score": (index + 1) / (count + 1)} for index in reversed(range(count))]
    return json_answer({results_field: ranking, **usage})


def answer(path: str, body: bytes) -> bytes:
    try:
        request = json.loads(body)
    except ValueError:
        return json_answer({"error": {"message": "malformed JSON"}}, "400 Bad Request")
    if path == "/v1/chat/completions":
        model = str(request.get("model") or "bench")
        return stream(model) if request.get("stream") else completion(model)
    if path == "/v1/embeddings":
        return embeddings(request)
    if path == "/v2/rerank":
        return reversed_ranking(request, "results", {"meta": {"billed_units": {"search_units": 1}}})
    if path == "/v1/rerank":
        return reversed_ranking(request, "data", {"usage": {"total_tokens": 0}})
    return json_answer({"error": {"message": f"no route {path}"}}, "404 Not Found")


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, embed_latency: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(":", 1) for line in lines if ":" in line)
            length = next((int(v) for k, v in headers.items() if k.strip().lower() == "content-length"), 0)
            body = await reader.readexactly(length)
            path = request_line.split(" ")[1]
            if embed_latency and path == "/v1/embeddings":
                await asyncio.sleep(embed_latency)
            writer.write(answer(path, body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int, host: str, embed_latency: float) -> None:
    server = await asyncio.start_server(
        functools.partial(serve_connection, embed_latency=embed_latency), host, port, backlog=1024
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--embed-latency-ms", type=float, default=0.0)
    arguments = parser.parse_args()
    uvloop.run(main(arguments.port, arguments.host, arguments.embed_latency_ms / 1000))
