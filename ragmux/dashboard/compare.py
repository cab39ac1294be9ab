"""Search compare: one query, two configurations. The configurations are validated by the search
API's own input; the comparison of the two hit lists and the snippets are plain functions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from gateway.connections.models import RouteKind
from gateway.connections.selectors import connection_list, route_list
from ragmux.dashboard.forms import Form, json_input
from ragmux.dashboard.store_form import rerank_connection_choices, rerank_route_choices, search_backend_options
from retrieval.search import Hit, SearchOptions
from retrieval.serializers import MAX_QUERY_CHARS, SearchInput, SearchOverrides
from stores.backends import backend_available
from stores.choices import FusionRule, RerankBackend, SearchBackend, SearchMode
from stores.models import RagStore
from stores.serializers import MAX_TOP_K

SIDES = ("a", "b")
SNIPPET_CHARACTERS = 320
# Characters of context kept before the first query word, so a snippet reads as a sentence.
SNIPPET_LEAD = 80
CHECKBOX = "typo_tolerance"
# Form inputs of one configuration (each prefixed with its side, "a-mode") and the store setting
# each one saves to.
SETTING_OF_INPUT = {
    "mode": "search_mode",
    "backend": "search_backend",
    "top_k": "top_k",
    "max_distance": "max_distance",
    "fusion": "fusion",
    "typo_tolerance": "typo_tolerance",
}
WEIGHT_INPUT_OF_SIDE = {"vector": "vector_weight", "lexical": "lexical_weight"}
WEIGHT_INPUTS = tuple(WEIGHT_INPUT_OF_SIDE.values())
# The rerank overrides of one configuration (compared, not saved: the store form sets them).
RERANK_CHECKBOX = "rerank"
RERANK_CHOICES = ("rerank_backend", "rerank_connection_id", "rerank_route_id")
# The search's filter (retrieval/filters.py), typed as JSON.
FILTERS = "filters"


@dataclass
class Configuration:
    """One side's settings as the form shows them, and the errors the search API found."""

    side: str
    values: dict[str, Any]
    errors: dict[str, list[str]] = field(default_factory=dict)
    overrides: dict[str, Any] | None = None


def _form_values(options: SearchOptions) -> dict[str, Any]:
    return {
        "mode": options.mode,
        "backend": options.backend,
        "top_k": options.top_k,
        "max_distance": options.max_distance,
        "vector_weight": options.vector_weight,
        "lexical_weight": options.lexical_weight,
        "fusion": options.fusion,
        "typo_tolerance": options.typo_tolerance,
        "rerank": options.rerank,
        "rerank_backend": options.rerank_backend,
        "rerank_connection_id": options.rerank_connection_id or "",
        "rerank_route_id": options.rerank_route_id or "",
    }


def configuration_choices() -> dict[str, Any]:
    """What the inputs of a configuration offer (templates/dashboard/_configuration_fields.html)."""
    return {
        "max_top_k": MAX_TOP_K,
        "modes": SearchMode.values,
        "backends": search_backend_options(),
        "fusions": FusionRule.values,
        "rerank_backends": RerankBackend.values,
        "rerank_connections": rerank_connection_choices(connection_list()),
        "rerank_routes": rerank_route_choices(route_list(kind=RouteKind.RERANK)),
    }


def default_configurations(store: RagStore) -> list[Configuration]:
    """A is the store's settings; B the same unreranked when the store reranks, else with the other
    of the two built-in lexical backends: the comparisons people come here for."""
    a = _form_values(SearchOptions.for_store(store))
    if a["rerank"]:
        return [Configuration("a", a), Configuration("b", {**a, "rerank": False})]
    other = SearchBackend.PGVECTOR if a["backend"] != SearchBackend.PGVECTOR else SearchBackend.BM25
    return [Configuration("a", a), Configuration("b", {**a, "backend": str(other)})]


def search_input(values: dict[str, Any], query: str | None) -> dict[str, Any]:
    """The search API's input for one configuration's form values (empty ones left out); without
    a query, the overrides alone."""
    data: dict[str, Any] = {
        **({} if query is None else {"query": query}),
        CHECKBOX: bool(values.get(CHECKBOX)),
        RERANK_CHECKBOX: bool(values.get(RERANK_CHECKBOX)),
    }
    for name in ("mode", "backend", "top_k", "max_distance", "fusion", *RERANK_CHOICES):
        if str(values.get(name, "")).strip():
            data[name] = str(values[name]).strip()
    weights = [str(values.get(name, "")).strip() for name in WEIGHT_INPUTS]
    if any(weights):
        data["fusion_weights"] = dict(zip(("vector", "lexical"), weights, strict=True))
    filters = json_input(str(values.get(FILTERS, "")))
    if query is not None and filters is not None:
        data[FILTERS] = filters
    return data


def configuration_from(params: QueryDict, side: str, query: str | None) -> Configuration:
    """One side's settings from the page's query string (or form), validated by the search API's
    input (its overrides alone without a query: an evaluation's configuration) and
    refused where the API would quietly change them: a top k above what a store returns (the API
    clamps it) and a backend this database cannot run (the API falls back)."""
    values = {name: params.get(f"{side}-{name}", "") for name in (*SETTING_OF_INPUT, *WEIGHT_INPUTS, *RERANK_CHOICES)}
    # One filter for both configurations: the page compares settings over the same documents.
    values[FILTERS] = params.get(FILTERS, "")
    for checkbox in (CHECKBOX, RERANK_CHECKBOX):
        values[checkbox] = f"{side}-{checkbox}" in params
    form = Form(initial=values, nested={"fusion_weights": WEIGHT_INPUT_OF_SIDE})
    data = form.validated(SearchOverrides if query is None else SearchInput, search_input(values, query))
    top_k = str(values["top_k"]).strip()
    if top_k.isdigit() and int(top_k) > MAX_TOP_K:
        form.error("top_k", f"Top k is at most {MAX_TOP_K} (0 takes the store's).")
    if values["backend"] in SearchBackend.values and not (status := backend_available(values["backend"])).available:
        form.error("backend", f"{values['backend']} cannot run here: {status.reason}.")
    overrides = None if data is None or form.errors else {k: v for k, v in data.items() if k != "query"}
    return Configuration(side, values, form.errors, overrides)


def query_problem(query: str) -> str | None:
    """Why the query cannot be searched, said beside it (not blamed on either configuration)."""
    if len(query) > MAX_QUERY_CHARS:
        return f"The query is too long: {len(query)} characters, at most {MAX_QUERY_CHARS}."
    return None


def store_settings_input(values: dict[str, Any]) -> dict[str, Any]:
    """The store settings one configuration saves as (the store API's field names)."""
    data = {SETTING_OF_INPUT[name]: values[name] for name in SETTING_OF_INPUT if str(values.get(name, "")).strip()}
    data["typo_tolerance"] = bool(values.get(CHECKBOX))
    data["fusion_weights"] = {"vector": values.get("vector_weight"), "lexical": values.get("lexical_weight")}
    return data


def hit_scores(hit: Hit, mode: str) -> list[tuple[str, str]]:
    """The scores of a hit that mean something in ``mode``, each named as the search API names it:
    a fused score and both ranks only where two lists were fused, a distance only where the query
    was embedded, the lexical scores only where the lexical side ran."""
    vector, lexical = mode in (SearchMode.VECTOR, SearchMode.HYBRID), mode in (SearchMode.LEXICAL, SearchMode.HYBRID)
    shown = []
    if hit.distance is not None:
        shown.append(("distance", f"{hit.distance:.4f}"))
    if mode == SearchMode.HYBRID:
        shown.append(("fused score", f"{hit.score:.5f}"))
    if vector:
        shown.append(("vector_rank", str(hit.vector_rank or "—")))
    if lexical:
        shown.append(("fts_rank", str(hit.fts_rank or "—")))
    if lexical and hit.lex_score is not None:
        shown.append(("lex_score", f"{hit.lex_score:.3f}"))
    if hit.rerank_score is not None:
        shown.append(("rerank_score", f"{hit.rerank_score:.3f}"))
    return shown


@dataclass(frozen=True)
class RankedHit:
    """A hit with its rank here and in the other configuration (None when absent there, or when
    the other configuration did not run: then ``compared`` is false and nothing is said of it)."""

    rank: int
    hit: Hit
    other_rank: int | None
    snippet: list[tuple[str, bool]]
    scores: list[tuple[str, str]]
    compared: bool = True

    @property
    def moved(self) -> bool:
        return self.other_rank is not None and self.other_rank != self.rank

    @property
    def only_here(self) -> bool:
        return self.compared and self.other_rank is None

    @property
    def movement(self) -> str:
        """How far the hit moved compared with the other column, in words."""
        if self.other_rank is None:
            return "only here"
        if self.other_rank == self.rank:
            return "same rank"
        steps = abs(self.other_rank - self.rank)
        return f"{'up' if self.rank < self.other_rank else 'down'} {steps}"


def rank_against(hits: list[Hit], other: list[Hit] | None, terms: list[str], *, mode: str) -> list[RankedHit]:
    other_rank = {hit.chunk_id: rank for rank, hit in enumerate(other or [], start=1)}
    return [
        RankedHit(
            rank,
            hit,
            other_rank.get(hit.chunk_id),
            snippet(hit.content, terms),
            hit_scores(hit, mode),
            compared=other is not None,
        )
        for rank, hit in enumerate(hits, start=1)
    ]


def snippet(content: str, terms: list[str]) -> list[tuple[str, bool]]:
    """A window of ``content`` around the first query word, as (text, is_query_word) pieces.

    Pieces stay plain text: the template escapes each one and marks the query words, so the
    document's own markup is shown, never run."""
    pattern = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, terms)) + r")(?!\w)", re.IGNORECASE) if terms else None
    text = " ".join(content.split())
    first = pattern.search(text) if pattern else None
    start = max(0, first.start() - SNIPPET_LEAD) if first else 0
    if start:
        # Start at a word boundary.
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < (first.start() if first else len(text)) else start
    end = min(len(text), start + SNIPPET_CHARACTERS)
    window = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    if pattern is None:
        return [(window, False)]
    pieces: list[tuple[str, bool]] = []
    cursor = 0
    for match in pattern.finditer(window):
        if match.start() > cursor:
            pieces.append((window[cursor : match.start()], False))
        pieces.append((match.group(0), True))
        cursor = match.end()
    if cursor < len(window):
        pieces.append((window[cursor:], False))
    return pieces
