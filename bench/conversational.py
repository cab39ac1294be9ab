"""Follow-up questions (issue 46): how well a chat's second turn, which refers back to its first
with a pronoun, retrieves under each `query_rewrite` mode, on the three development collections
(Cranfield, TIME, LISA), judged by the original query's qrels (nDCG@10).

    python bench/conversational.py measure [--llm-url URL --llm-model NAME] [--llm-limit N]
    var/bench-llm/bin/python bench/conversational.py serve --gguf FILE [--port 8011]

The conversational set, by a fixed rule applied to each judged query (lower-cased, the final
" ." dropped):

1. Its words are split at spaces; a *content word* has a letter or digit and is not in
   ``FUNCTION_WORDS`` (English function words, question words and request phrasing).
2. The *subject* is the longest run of consecutive content words (the first of the longest),
   a run ending at a word followed by punctuation (``,`` ``.`` ``;`` ``:``);
   a query whose subject leaves no content word outside it is left out (counted).
3. First turn: ``What is known about <subject>?``
4. Second turn: the query with its subject replaced by a pronoun: ``they`` when the subject
   opens the query and ends in a plural-looking word (``s``, not ``ss``/``us``/``is``), ``it``
   when it opens the query otherwise, ``them`` / ``it`` the same way elsewhere; ending in ``?``.
   So "what similarity laws must be obeyed when constructing aeroelastic models of heated high
   speed aircraft ." becomes "What is known about heated high speed aircraft?" then "what
   similarity laws must be obeyed when constructing aeroelastic models of it?".

Each second turn is searched as each mode builds its query: ``off`` the second turn alone,
``last_turns`` the product's rule (`gateway.clients.followups.last_turns_query`), ``llm`` the
standalone question a chat model answers to the product's own prompt
(`gateway.clients.followups.condense_prompt`, read by `standalone_question`, falling back to the
second turn on any failure as the product does); the ceiling row searches the original query.
The search is the quality bench's stemmed reference (bm25s, Lucene BM25 k1 1.2 b 0.75, English
stemming and stop words, whole documents: `bench/quality.py`), so the bench needs no database
and runs in seconds; what it compares is the query, not the store.

``llm`` needs an OpenAI-compatible chat server (``--llm-url``; left out, the row says it was not
measured). ``serve`` is one for a GGUF file, for this bench only: llama.cpp's own server through
its prebuilt Python wheel (``xllamacpp``), in the venv ``make bench-llm`` makes with the model
this machine's registries carry (see the Makefile; nothing of it is a dependency of ragmux).

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTIONS = {
    "cranfield": None,  # harness.DEFAULT_DATASET: the shared folder beside the checkout
    "time": REPO / "bench" / "data" / "time",
    "lisa": REPO / "bench" / "data" / "lisa",
}
FUNCTION_WORDS = frozenset(
    """a about above after again against all also am an and any are as at be been before being
    below between both but by can could did do does doing during each either especially few for
    from further had has have having he her here hers him his how i if in into is it its itself
    just me might more most must my no nor not now of off on once only or other our out over own
    same shall she should so some such than that the their them then there these they this those
    through to too under until up upon very was we were what when where whether which while who
    whom whose why will with within without would you your
    interested interest information papers paper articles article receive find wish like want
    please concerning regarding especially particularly any known give given""".split()
)
MODES = ("off", "last_turns", "llm")
CEILING = "ceiling: the original query"
LLM_TIMEOUT = 120.0


# --- the conversational set (pure) -------------------------------------------------------------


def _content(word: str) -> bool:
    return bool(re.search(r"[^\W_]", word)) and word.strip(".,;:?!()'\"") not in FUNCTION_WORDS


def _plural(word: str) -> bool:
    word = word.strip(".,;:?!()'\"")
    return word.endswith("s") and not word.endswith(("ss", "us", "is"))


def _runs(words: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive content words; punctuation after a word ends its run."""
    runs, start = [], None
    for index, word in enumerate(words):
        if _content(word):
            start = index if start is None else start
            if word[-1] in ",.;:":
                runs.append((start, index + 1))
                start = None
        elif start is not None:
            runs.append((start, index))
            start = None
    return runs + ([(start, len(words))] if start is not None else [])


def split_turns(query: str) -> tuple[str, str] | None:
    """(first turn, second turn) of ``query`` by the module's rule; None when the subject would
    leave the second turn no content word of its own."""
    words = query.lower().removesuffix(" .").strip().rstrip("?. ").split()
    runs = _runs(words)
    if not runs:
        return None
    first, end = max(runs, key=lambda run: (run[1] - run[0], -run[0]))
    rest = words[:first] + words[end:]
    if not any(_content(word) for word in rest):
        return None
    subject = " ".join(word.strip(".,;:()'\"") for word in words[first:end])
    plural = _plural(words[end - 1])
    pronoun = ("they" if plural else "it") if first == 0 else ("them" if plural else "it")
    trailing = words[end - 1][-1] if words[end - 1][-1] in ",.;:" else ""
    second = " ".join([*words[:first], pronoun + trailing, *words[end:]])
    return f"What is known about {subject}?", f"{second}?"


def conversational_set(queries: dict[str, str], qrels: dict) -> tuple[dict[str, tuple[str, str, str]], int]:
    """query id → (original, first turn, second turn) for the judged queries, and how many were
    left out by the rule."""
    turns, left_out = {}, 0
    for query_id, text in queries.items():
        if not any(gain > 0 for gain in qrels.get(query_id, {}).values()):
            continue
        split = split_turns(text)
        if split is None:
            left_out += 1
        else:
            turns[query_id] = (text, *split)
    return turns, left_out


# --- the modes -----------------------------------------------------------------------------------


def condensed(client, url: str, model: str, first: str, second: str) -> tuple[str, str]:
    """The `llm` query of a two-turn conversation (the product's prompt and reading), and why it
    fell back to the second turn ("" when it did not)."""
    from gateway.clients.followups import condense_prompt, standalone_question

    assistant = "I can help with that. What would you like to know?"
    prompt = condense_prompt([("user", first), ("assistant", assistant), ("user", second)])
    body = {"model": model, "messages": prompt, "temperature": 0, "max_tokens": 100}
    try:
        reply = client.post(f"{url.rstrip('/')}/chat/completions", json=body, timeout=LLM_TIMEOUT)
        reply.raise_for_status()
        text = reply.json()["choices"][0]["message"]["content"]
    except Exception as exc:  # noqa: BLE001 - the product's contract: any failure falls back
        return second, f"{type(exc).__name__}: {exc}"
    query, reason = standalone_question(text, second)
    return (query, "") if query else (second, reason)


def mode_queries(turns: dict, args) -> tuple[dict[str, dict[str, str]], dict]:
    """mode → query id → the text searched; and what the `llm` mode did."""
    from gateway.clients.followups import last_turns_query

    queries = {
        "off": {qid: second for qid, (_, _, second) in turns.items()},
        "last_turns": {qid: last_turns_query([first, second]) for qid, (_, first, second) in turns.items()},
        CEILING: {qid: original for qid, (original, _, _) in turns.items()},
    }
    llm = {"measured": False}
    if args.llm_url:
        import httpx

        chosen = list(turns)[: args.llm_limit] if args.llm_limit else list(turns)
        started, fallbacks, asked = time.monotonic(), [], {}
        with httpx.Client() as client:
            for qid in chosen:
                _, first, second = turns[qid]
                asked[qid], reason = condensed(client, args.llm_url, args.llm_model, first, second)
                if reason:
                    fallbacks.append(reason)
        queries["llm"] = asked
        seconds = time.monotonic() - started
        llm = {"measured": True, "queries": len(chosen), "fallbacks": len(fallbacks), "seconds": round(seconds, 1)}
        llm["examples"] = [(turns[qid][2], asked[qid]) for qid in chosen[:3]]
    return queries, llm


# --- the search and its score ------------------------------------------------------------------


def rankings(corpus: list[dict], queries: dict[str, str]) -> dict[str, list[str]]:
    """The quality bench's stemmed reference: bm25s over whole documents, English stemming and
    stop words; each query's top 100 documents."""
    import bm25s
    import numpy as np
    import Stemmer
    from harness import document_text
    from quality import bm25s_index, bm25s_top

    tokenize = {"stopwords": "en", "stemmer": Stemmer.Stemmer("english"), "show_progress": False}
    documents = [doc for doc in corpus if document_text(doc)]
    ids = np.arange(len(documents), dtype=np.int64)
    tokens = bm25s.tokenize([document_text(doc) for doc in documents], **tokenize)
    retriever = bm25s_index(tokens)
    ranked = {}
    for qid, text in queries.items():
        words = bm25s.tokenize([text], return_ids=False, **tokenize)[0]
        top = bm25s_top(retriever, ids, [tokens.vocab[word] for word in words if word in tokens.vocab])
        ranked[qid] = [documents[n]["_id"] for n in top]
    return ranked


def mean_ndcg(ranked: dict[str, list[str]], qrels: dict, query_ids) -> float:
    from retrieval.evaluation.scores import ndcg

    return round(sum(ndcg(ranked[qid], qrels[qid]) for qid in query_ids) / len(query_ids), 4)


def measure_collection(name: str, folder: Path, args) -> dict:
    from harness import load_beir

    corpus, queries, qrels = load_beir(folder)
    turns, left_out = conversational_set(queries, qrels)
    texts, llm = mode_queries(turns, args)
    scores, ranked = {}, {}
    for mode, chosen in texts.items():
        ranked[mode] = rankings(corpus, chosen)
        scores[mode] = mean_ndcg(ranked[mode], qrels, chosen)
    if llm["measured"] and len(texts["llm"]) < len(turns):
        # The llm row covers a subset: every row on that subset too, to compare like with like.
        llm["same_subset"] = {mode: mean_ndcg(ranked[mode], qrels, texts["llm"]) for mode in texts}
    example = next(iter(turns.values()))
    return {"collection": name, "queries": len(turns), "left_out": left_out, "ndcg@10": scores, "llm": llm,
            "example": {"original": example[0], "first": example[1], "second": example[2]}}  # fmt: skip


def measure(args) -> None:
    # Appended: bench/gateway.py must not hide the product's gateway package.
    sys.path.append(str(REPO / "bench"))
    from harness import DEFAULT_DATASET, print_table, report

    results = []
    for name, folder in COLLECTIONS.items():
        results.append(measure_collection(name, folder or DEFAULT_DATASET, args))
        print(json.dumps(results[-1]["example"]), flush=True)
    rows = [(mode, *(f"{r['ndcg@10'][mode]:.3f}" if mode in r["ndcg@10"] else "not measured" for r in results))
            for mode in (*MODES, CEILING)]  # fmt: skip
    print_table(rows, ("second turn searched as", *(f"{r['collection']} ({r['queries']})" for r in results)))
    report({"results": results})


# --- the bench's local chat server (runs in the venv `make bench-llm` makes) ---------------------


def serve(args) -> None:
    """llama.cpp's OpenAI-compatible server (`xllamacpp`, a prebuilt wheel) on 127.0.0.1 for a GGUF
    file: one conversation at a time, ``--threads`` threads; a request's ``temperature`` 0 is
    greedy decoding."""
    import threading

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(Path(args.gguf).resolve())
    params.n_ctx = 4096  # the product's prompt: at most CONVERSATION_CHARS of conversation
    params.n_parallel = 1
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
    params.port = args.port
    server = xllamacpp.Server(params)
    print(f"serving {Path(args.gguf).name} on {server.listening_address}/v1", flush=True)
    threading.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measuring = commands.add_parser("measure")
    measuring.add_argument("--llm-url", default="", help="an OpenAI-compatible base URL, e.g. http://127.0.0.1:8011/v1")
    measuring.add_argument("--llm-model", default="local")
    measuring.add_argument("--llm-limit", type=int, default=0, help="condense only the first N second turns of each")
    serving = commands.add_parser("serve")
    serving.add_argument("--gguf", required=True)
    serving.add_argument("--port", type=int, default=8011)
    serving.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args)
    else:
        sys.path.insert(0, str(REPO))
        measure(args)


if __name__ == "__main__":
    main()
