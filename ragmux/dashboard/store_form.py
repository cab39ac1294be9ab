"""The store create and edit form: every setting, grouped as the RAG documentation groups them,
with its help text. Validation is the store API's own (`StoreCreateInput`, then the service's
cross-field and database checks); this module only turns form posts into that input and the
errors back into messages beside their fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.connections.models import Capability, why_cannot
from gateway.connections.selectors import default_embedding_connection
from ragmux.dashboard.forms import Form
from stores.backends import backend_statuses, text_search_configs
from stores.choices import ChunkingStrategy, FusionRule, RerankBackend, SearchBackend, SearchMode
from stores.models import STORE_SETTINGS, RagStore, store_defaults
from stores.selectors import embedding_connection_locked
from stores.serializers import StoreCreateInput

CHECKBOXES = ("contextual_chunks", "typo_tolerance", "rerank", "ocr")
# A select whose empty choice means "none" (null), not "leave unchanged".
NULLABLE_SELECTS = ("rerank_connection_id", "rerank_route_id")
# The fusion weights are one setting in the API and two inputs here.
WEIGHT_INPUTS = {"vector": "fusion_vector", "lexical": "fusion_lexical"}


@dataclass(frozen=True)
class Setting:
    name: str
    label: str
    help: str
    kind: str = "number"  # number, checkbox, select or text
    step: str = "1"


@dataclass(frozen=True)
class Option:
    value: str
    label: str
    disabled: bool = False
    # The rerank backend a connection fits; app.js hides the connections that do not fit the chosen one.
    fits: str = ""


GROUPS: tuple[tuple[str, tuple[Setting, ...]], ...] = (
    (
        "Embedding",
        (
            Setting(
                "embedding_connection_id",
                "Embedding connection",
                "The model connection that embeds chunks and queries. Fixed once the store holds chunks.",
                kind="select",
            ),
            Setting(
                "contextual_chunks",
                "Contextual chunks",
                "Prefix the file name and section to the text that is embedded (the stored text is unchanged).",
                kind="checkbox",
            ),
        ),
    ),
    (
        "Chunking",
        (
            Setting(
                "chunking_strategy",
                "Chunking strategy",
                "section packs paragraphs within one section and page; word, semantic and character cut "
                "at those boundaries.",
                kind="select",
            ),
            Setting("chunk_size", "Chunk size", "Characters per chunk, 200–20000 (0 means the default)."),
            Setting(
                "chunk_overlap",
                "Chunk overlap",
                "Characters carried over between consecutive chunks; smaller than the chunk size.",
            ),
        ),
    ),
    (
        "Scans and images",
        (
            Setting(
                "ocr",
                "OCR",
                "Read scanned PDF pages (pages without a text layer) and images (PNG, JPEG, TIFF, WebP) by OCR. "
                "Off, scans fail and images are refused when read.",
                kind="checkbox",
            ),
            Setting(
                "ocr_language",
                "OCR language",
                "Tesseract language codes, joined by + for documents in several (eng, deu, fra+eng); each needs "
                "its Debian package tesseract-ocr-<code> on the server (eng is installed).",
                kind="text",
            ),
        ),
    ),
    (
        "Search",
        (
            Setting(
                "search_mode",
                "Search mode",
                "vector (nearest neighbours), hybrid (vector and lexical lists fused) or lexical.",
                kind="select",
            ),
            Setting(
                "search_backend",
                "Search backend",
                "Who answers the lexical half: pgvector (PostgreSQL full text), bm25 or pg_search (ParadeDB). "
                "Switching needs no reprocessing.",
                kind="select",
            ),
            Setting(
                "index_config",
                "Index language",
                "The PostgreSQL text search configuration the store's lexical index is built in: its stemming and "
                "stop words (english finds “policies” from “policy”); simple keeps every word as written. Pick the "
                "language of the store's documents, or simple for mixed languages, identifiers and code. "
                "Changing it rebuilds the lexical index in the background, without reprocessing or re-embedding; "
                "the store stays searchable with the old index until the new one is ready. pg_search ignores it.",
                kind="select",
            ),
            Setting(
                "fts_config",
                "Text search configuration",
                "The PostgreSQL configuration that parses queries on the pgvector backend, and only while the "
                "index language is simple: under any other index language, queries are parsed with the index's own "
                "configuration (as bm25 always does). pg_search ignores this setting, as it ignores the index "
                "language.",
                kind="text",
            ),
            Setting("top_k", "Top k", "Passages returned per search, 1–50 (0 means the default)."),
            Setting(
                "max_distance",
                "Maximum distance",
                "Cosine distance cut-off applied after fusion, 0–2 (0 = off).",
                step="0.01",
            ),
            Setting("fusion", "Fusion", "How hybrid search fuses the vector and lexical lists.", kind="select"),
            Setting(
                "fusion_vector",
                "Vector weight",
                "The vector list's share of the fused score, 0–100; the two weights cannot both be 0.",
                step="0.1",
            ),
            Setting(
                "fusion_lexical",
                "Lexical weight",
                "The lexical list's share of the fused score, 0–100.",
                step="0.1",
            ),
            Setting(
                "typo_tolerance",
                "Typo tolerance",
                "Correct query words the store does not know (4 letters or more) to its vocabulary, within edit "
                "distance 2.",
                kind="checkbox",
            ),
        ),
    ),
    (
        "Reranking",
        (
            Setting(
                "rerank",
                "Rerank",
                "Reorder the top candidates with the backend below before they are cut to top k. A rerank that "
                "fails keeps the fused order, and the search says so.",
                kind="checkbox",
            ),
            Setting("rerank_backend", "Rerank backend", "Who reorders the candidates.", kind="select"),
            Setting(
                "rerank_connection_id",
                "Rerank connection",
                "The connection that reranks: required for cohere and voyage; for llm a chat connection, used where "
                "no project's chat model is at hand (the search compare). Only connections that fit the backend "
                "are offered.",
                kind="select",
            ),
            Setting(
                "rerank_route_id",
                "Rerank route",
                "Or a rerank route, whose targets are tried in order when one fails (instead of a connection, "
                "not with one). Only routes whose every target fits the backend are offered.",
                kind="select",
            ),
            Setting(
                "rerank_candidates",
                "Rerank candidates",
                "Fused hits sent to the reranker, 1–100 (0 means the default).",
            ),
        ),
    ),
    (
        "Quotas",
        (
            Setting(
                "max_documents",
                "Maximum documents",
                "Documents the store may hold, in any status (0 = unlimited; MAX_DOCUMENTS_PER_STORE caps every "
                "store).",
            ),
            Setting(
                "max_bytes",
                "Maximum bytes",
                "Sum of the uploaded files' sizes in bytes (0 = unlimited; MAX_BYTES_PER_STORE_MB caps every store).",
            ),
        ),
    ),
)
SETTING_INPUTS = tuple(setting.name for _, settings in GROUPS for setting in settings)
# One line on each fusion rule, shown with its choice.
FUSION_LINES = {
    FusionRule.SCORES: "each list's scores placed between 0 and 1, then their weighted mean (fused score 0–1)",
    FusionRule.RRF: "reciprocal rank fusion: weight / (60 + rank) summed over the lists (ranks only)",
}
# One line on each rerank backend, shown with its choice.
RERANK_BACKEND_LINES = {
    RerankBackend.LLM: "the project's own chat model ranks them in one prompt (one extra completion, 0.5–3 s)",
    RerankBackend.COHERE: "Cohere Rerank, through a cohere_rerank connection (50–300 ms, billed per search)",
    RerankBackend.VOYAGE: "Voyage Rerank, through a voyage_rerank connection (50–300 ms, billed per token)",
}


# One line on each search backend: what ranks the lexical half, and how.
SEARCH_BACKEND_LINES = {
    SearchBackend.PGVECTOR: "PostgreSQL full text: ts_rank_cd counts how often and how close together the query's "
    "words occur, and weighs a common word (a number such as 30) as much as a rare one.",
    SearchBackend.BM25: "BM25 over the store's own word statistics: a word rare in the store weighs more than a common "
    "one, and a long passage gains nothing from its length.",
    SearchBackend.PG_SEARCH: "ParadeDB's BM25 index inside PostgreSQL, with its own tokenizer; it needs the pg_search "
    "extension, and without it pgvector answers.",
}


def search_backend_options() -> list[Option]:
    """The search backends as every form offers them: one this database cannot run is shown,
    marked and disabled."""
    return [
        Option(status.id, status.id)
        if status.available
        else Option(status.id, f"{status.id} (not available here)", True)
        for status in backend_statuses()
    ]


def _initial(store: RagStore | None) -> dict[str, Any]:
    if store is None:
        values = {"embedding_connection_id": None, **store_defaults(), "name": ""}
    else:
        values = {name: getattr(store, name) for name in STORE_SETTINGS} | {"name": store.name}
    weights = values.pop("fusion_weights")
    for side, input_name in WEIGHT_INPUTS.items():
        values[input_name] = weights[side]
    return values


def _input(values: dict[str, Any]) -> dict[str, Any]:
    """The API's input from a form's values: unchecked boxes are false, empty fields are left out."""
    data: dict[str, Any] = {name: bool(values[name]) for name in CHECKBOXES}
    for name in SETTING_INPUTS:
        value = str(values.get(name) or "").strip()
        if name not in CHECKBOXES and value:
            data[name] = value
        elif name in NULLABLE_SELECTS and name in values:
            data[name] = None
    weights = {side: data.pop(input_name, "") for side, input_name in WEIGHT_INPUTS.items()}
    if any(weights.values()):
        data["fusion_weights"] = weights
    if str(values.get("name") or "").strip():
        data["name"] = values["name"].strip()
    return data


def rerank_connection_choices(connections) -> list[tuple[Any, str]]:
    """Each connection that can rerank, with the backend it fits."""
    return [
        (connection, backend)
        for connection in connections
        for backend in RerankBackend.values
        if why_cannot(connection, Capability.RERANK, rerank_backend=backend) is None
    ]


def rerank_route_choices(routes) -> list[tuple[Any, str]]:
    """Each rerank route (its targets prefetched) with the backend every one of its targets fits."""
    return [
        (route, backend)
        for route in routes
        for backend in RerankBackend.values
        if all(why_cannot(t.connection, Capability.RERANK, rerank_backend=backend) is None for t in route.targets.all())
    ]


def shown_default(name: str) -> str | None:
    """A setting's default as its help text ends with it, from the model (the one place it is
    written); None for the embedding connection, which has none."""
    defaults = store_defaults()
    side = next((side for side, input_name in WEIGHT_INPUTS.items() if input_name == name), None)
    value = defaults["fusion_weights"][side] if side else defaults.get(name)
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


class StoreForm(Form):
    def __init__(self, *, store: RagStore | None, connections, rerank_routes, request=None):
        super().__init__(
            request,
            names=("name", *(name for name in SETTING_INPUTS if name not in CHECKBOXES)),
            checkboxes=CHECKBOXES,
            initial=_initial(store),
            nested={"fusion_weights": WEIGHT_INPUTS},
        )
        self.store = store
        self.connections = [c for c in connections if c.supports_embeddings]
        if store is None and self.values.get("embedding_connection_id") is None:
            default = default_embedding_connection(self.connections)
            if default is not None:
                self.values["embedding_connection_id"] = default.pk
        self.embedding_locked = store is not None and embedding_connection_locked(store)
        self.rerank_connections = rerank_connection_choices(connections)
        self.rerank_routes = rerank_route_choices(rerank_routes)

    def save(self, save: Callable[..., Any]) -> bool:
        """Validates the form and calls ``save(name=…, values=…)`` with the store's name and
        settings: True when saved (its return value is ``result``), else False with the errors."""
        values = self.validated(StoreCreateInput, _input(self.values), partial=self.store is not None)
        if values is None:
            return False
        name = values.pop("name", self.store.name if self.store else "")
        return self.run(lambda: save(name=name, values=values))

    def groups(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """Each group with its fields ready to render: value, errors, limits and choices."""
        limits = StoreCreateInput().fields
        weights = limits["fusion_weights"].fields
        rendered = []
        for title, settings in GROUPS:
            fields = []
            for setting in settings:
                field = limits.get(setting.name) or weights[setting.name.removeprefix("fusion_")]
                value = self.values.get(setting.name)
                fields.append(
                    {
                        "setting": setting,
                        "default": shown_default(setting.name),
                        "value": str(value) if setting.kind == "select" and value is not None else value,
                        "errors": self.errors.get(setting.name, []),
                        "min": getattr(field, "min_value", None),
                        "max": getattr(field, "max_value", None),
                        "options": self._options(setting.name),
                    }
                )
            rendered.append((title, fields))
        return rendered

    def _options(self, name: str) -> list[Option]:
        if name == "embedding_connection_id":
            # Once the store holds chunks the service refuses any other: only its own is offered.
            offered = [
                c for c in self.connections if not self.embedding_locked or c.pk == self.store.embedding_connection_id
            ]
            return [Option(str(c.pk), f"{c.name} ({c.provider_type} · {c.model_name})") for c in offered]
        if name == "rerank_backend":
            return [Option(value, f"{value}: {line}") for value, line in RERANK_BACKEND_LINES.items()]
        if name == "fusion":
            return [Option(value, f"{value}: {line}") for value, line in FUSION_LINES.items()]
        chosen = str(self.values.get("rerank_backend") or RerankBackend.LLM)
        if name == "rerank_connection_id":
            return [
                Option(str(c.pk), f"{c.name} ({c.provider_type} · {c.model_name})", backend != chosen, backend)
                for c, backend in self.rerank_connections
            ]
        if name == "rerank_route_id":
            return [
                Option(str(route.pk), f"{route.name} ({len(route.targets.all())} targets)", backend != chosen, backend)
                for route, backend in self.rerank_routes
            ]
        if name == "chunking_strategy":
            return [Option(value, value) for value in ChunkingStrategy.values]
        if name == "index_config":
            return [Option(config, config) for config in text_search_configs()]
        if name == "search_mode":
            return [Option(value, value) for value in SearchMode.values]
        if name == "search_backend":
            return search_backend_options()
        return []
