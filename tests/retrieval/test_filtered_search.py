"""Filters against a brute-force reference: on random small stores with random attributes and tags,
and random filters of every operator, each backend and mode returns exactly the hits an unfiltered
search ranks, restricted to the documents passing the filter (checked here in Python, not SQL) and
cut to top_k afterwards — by the selective (exact) paths and by the broad (overfetched) ones."""

import contextlib
import itertools
import operator
from unittest import mock

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ingestion.services import IncomingFile, document_upload
from retrieval import filtered
from retrieval.filters import parse_filter
from retrieval.ranking import fuse
from retrieval.search import Hit, store_search
from stores.choices import FusionRule
from stores.models import Document, RagStore
from stores.services import store_create

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = ["river", "delta", "stone", "glacier", "harbour", "lantern", "meadow", "copper"]
STORE_NUMBERS = itertools.count()
CONFIGURATIONS = [
    ("vector", "bm25"),
    ("lexical", "bm25"),
    ("lexical", "pgvector"),
    ("hybrid", "bm25"),
    ("hybrid", "pgvector"),
]
# The attributes' values come from few choices, so that filters match some documents and not others.
VALUES = {
    "customer": st.sampled_from(["acme", "globex", "initech"]),
    "year": st.sampled_from([2019, 2020, 2021.5, 2024]),
    "public": st.booleans(),
    "date": st.sampled_from(["2023-12-31", "2024-01-01", "2024-06-30"]),
    # A key whose value type varies between documents: comparisons across types never match.
    "mixed": st.sampled_from(["7", 7, True, "b"]),
}
TAGS = ["hr", "legal", "eng"]

attributes = st.fixed_dictionaries({}, optional=VALUES)
documents = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=60).map(" ".join),
        attributes,
        st.lists(st.sampled_from(TAGS), unique=True, max_size=2),
    ),
    min_size=2,
    max_size=8,
)


def comparisons():
    draw_key = st.sampled_from([*VALUES, "missing"])
    scalar = st.one_of(*VALUES.values(), st.sampled_from(["zzz", 0, False]))
    rangeable = st.one_of(VALUES["year"], VALUES["date"], st.sampled_from(["7", "a", 7, 2021]))
    listed = st.lists(st.one_of(VALUES["customer"], VALUES["year"], st.sampled_from(["7", 7])), min_size=1, max_size=3)
    attribute = st.one_of(
        st.builds(lambda t, k, v: {"type": t, "key": k, "value": v}, st.sampled_from(["eq", "ne"]), draw_key, scalar),
        st.builds(
            lambda t, k, v: {"type": t, "key": k, "value": v},
            st.sampled_from(["gt", "gte", "lt", "lte"]),
            draw_key,
            rangeable,
        ),
        st.builds(lambda t, k, v: {"type": t, "key": k, "value": v}, st.sampled_from(["in", "nin"]), draw_key, listed),
    )
    tags = st.one_of(
        st.builds(
            lambda t, v: {"type": t, "key": "tags", "value": v}, st.sampled_from(["eq", "ne"]), st.sampled_from(TAGS)
        ),
        st.builds(
            lambda t, v: {"type": t, "key": "tags", "value": v},
            st.sampled_from(["in", "nin"]),
            st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
        ),
    )
    return st.one_of(attribute, tags)


filters = st.recursive(
    comparisons(),
    lambda children: st.builds(
        lambda t, fs: {"type": t, "filters": fs},
        st.sampled_from(["and", "or"]),
        st.lists(children, min_size=1, max_size=3),
    ),
    max_leaves=5,
)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(held, wanted) -> bool:
    if isinstance(held, bool) or isinstance(wanted, bool):
        return isinstance(held, bool) and isinstance(wanted, bool) and held == wanted
    if isinstance(held, str) or isinstance(wanted, str):
        return isinstance(held, str) and isinstance(wanted, str) and held == wanted
    return held == wanted


RANGES = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}


def passes(node: dict, attributes: dict, tags: list[str]) -> bool:
    """The reference: the filter's documented meaning, evaluated on one document."""
    kind = node["type"]
    if kind in ("and", "or"):
        results = [passes(child, attributes, tags) for child in node["filters"]]
        return all(results) if kind == "and" else any(results)
    key, value = node["key"], node["value"]
    if key == "tags":
        found = value in tags if kind in ("eq", "ne") else any(item in tags for item in value)
        return found if kind in ("eq", "in") else not found
    if kind in ("eq", "ne"):
        found = key in attributes and _same(attributes[key], value)
        return found if kind == "eq" else not found
    if kind in ("in", "nin"):
        found = key in attributes and any(_same(attributes[key], item) for item in value)
        return found if kind == "in" else not found
    if key not in attributes:
        return False
    held = attributes[key]
    comparable = (_number(held) and _number(value)) or (isinstance(held, str) and isinstance(value, str))
    return comparable and RANGES[kind](held, value)


def ranked(store, query, mode, backend) -> list[Hit]:
    """Every chunk an unfiltered search ranks, best first."""
    everything = 10**4
    overrides = {"mode": mode, "backend": backend, "top_k": everything, "fusion": FusionRule.SCORES}
    return store_search(store=store, query=query, overrides=overrides).hits


def reference(store, query, mode, backend, passing: set[int], top_k: int, fusion: str) -> list[int]:
    limit = 3 * top_k  # each side's candidates (SearchOptions.candidates)
    if mode == "hybrid":
        # Each side's own scores: the vector distance, and the lexical score (BM25's, or under
        # pgvector the lexical search's fused score, its ts_rank_cd placed between 0 and 1, which
        # min-max fusion places again the same way).
        vector = [(h.chunk_id, h.distance) for h in ranked(store, query, "vector", backend) if h.chunk_id in passing]
        lexical = [
            (h.chunk_id, h.score if h.lex_score is None else h.lex_score)
            for h in ranked(store, query, "lexical", backend)
            if h.chunk_id in passing
        ]
        return [item.chunk_id for item in fuse(vector[:limit], lexical[:limit], rule=fusion)][:top_k]
    return [h.chunk_id for h in ranked(store, query, mode, backend) if h.chunk_id in passing][:top_k]


@pytest.fixture
def make_store(fake_connection, ingest_now):
    def make(docs) -> RagStore:
        values = {"embedding_connection_id": fake_connection.id, "chunk_size": 200, "chunk_overlap": 0}
        store = store_create(name=f"filtered-{next(STORE_NUMBERS)}", values=values)
        files = [
            IncomingFile(filename=f"doc{n}.txt", data=f"{text} doc{n}".encode(), tags=tuple(tags), attributes=attrs)
            for n, (text, attrs, tags) in enumerate(docs)
        ]
        assert document_upload(store=store, files=files).refusal is None
        ingest_now()
        return RagStore.objects.get(pk=store.pk)

    return make


def passing_chunks(store, raw_filter) -> set[int]:
    return {
        chunk_id
        for document in Document.objects.filter(store=store).prefetch_related("chunks")
        if passes(raw_filter, document.attributes, document.tags)
        for chunk_id in document.chunks.values_list("id", flat=True)
    }


# How many candidates the overfetching paths ask an unfiltered side for, given the limit: a few
# more than the limit (the passing ones usually suffice), or one (too few pass: the exact
# fallback answers).
ASKED = {"overfetched": lambda limit: limit + 2, "short": lambda limit: 1}


@contextlib.contextmanager
def taking(path: str):
    """The paths a filtered search takes: its own choice for these small stores (the exact ones),
    or the overfetching ones (HNSW on the vector side)."""
    if path == "exact":
        yield
        return
    with (
        override_settings(VECTOR_EXACT_SCAN_MAX_CHUNKS=-1),
        mock.patch.object(filtered, "BM25_EXACT_MAX_CHUNKS", -1),
        mock.patch.object(filtered.StoreFilter, "overfetch", lambda self, limit: ASKED[path](limit)),
    ):
        yield


@pytest.mark.parametrize("path", ["exact", "overfetched", "short"])
# Without shrinking: each example builds a store, and a shrink would build hundreds.
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    docs=documents,
    raw_filters=st.lists(filters, min_size=3, max_size=3),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    top_k=st.integers(min_value=1, max_value=4),
    fusion=st.sampled_from(FusionRule.values),
)
def test_every_backend_returns_what_exists_among_the_passing_chunks(
    make_store, path, docs, raw_filters, query, top_k, fusion
):
    store = make_store(docs)
    for raw_filter in raw_filters:
        passing = passing_chunks(store, raw_filter)
        for mode, backend in CONFIGURATIONS:
            expected = reference(store, query, mode, backend, passing, top_k, fusion)
            with taking(path):
                result = store_search(
                    store=store,
                    query=query,
                    overrides={
                        "mode": mode,
                        "backend": backend,
                        "top_k": top_k,
                        "fusion": fusion,
                        "filters": parse_filter(raw_filter),
                    },
                )
            found = [hit.chunk_id for hit in result.hits]
            assert found == expected, (mode, backend, raw_filter)
            assert set(found) <= passing


def test_a_filter_reads_attributes_and_tags_set_at_upload(make_store):
    store = make_store(
        [
            ("river stone", {"customer": "acme"}, ["hr"]),
            ("river delta", {"customer": "globex"}, ["legal"]),
        ]
    )
    for raw, names in [
        ({"type": "eq", "key": "customer", "value": "acme"}, ["doc0.txt"]),
        ({"type": "eq", "key": "tags", "value": "legal"}, ["doc1.txt"]),
        ({"type": "ne", "key": "customer", "value": "acme"}, ["doc1.txt"]),
    ]:
        result = store_search(store=store, query="river", overrides={"filters": parse_filter(raw)})
        assert [hit.filename for hit in result.hits] == names
        assert result.hits[0].attributes == ({"customer": "acme"} if names == ["doc0.txt"] else {"customer": "globex"})
