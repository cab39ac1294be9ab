"""SEARCH_TIMEOUT: every statement of a search runs under PostgreSQL's statement_timeout, a
search that exceeds it is answered 503 `search_timeout`, and the setting never outlives the
search on its connection."""

import psycopg
import pytest
from django.db import connection, transaction

from ingestion.services import IncomingFile, document_upload
from retrieval.search import store_search
from stores.services import store_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(fake_connection, ingest_now):
    created = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    files = [IncomingFile(filename=f"{n}.txt", data=f"alpha document number {n}".encode()) for n in range(5)]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return created


@pytest.fixture
def postings_locked():
    """Another session holds an exclusive lock on the BM25 postings (as a migration or a manual
    maintenance statement would): a BM25 search waits for it, deterministically, until its
    statement timeout cancels it."""
    database = connection.settings_dict
    with psycopg.connect(
        dbname=database["NAME"],
        user=database["USER"],
        password=database["PASSWORD"] or None,
        host=database["HOST"],
        port=database["PORT"],
    ) as other:
        other.execute("LOCK TABLE chunk_terms IN ACCESS EXCLUSIVE MODE")
        yield
        other.rollback()


def statement_timeout_now() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def test_a_search_over_the_timeout_is_a_503_search_timeout(api, store, settings, postings_locked):
    settings.SEARCH_TIMEOUT = 0.2

    response = api("viewer").post(
        f"/admin/api/rag-stores/{store.pk}/search", json={"query": "alpha", "mode": "lexical", "backend": "bm25"}
    )

    assert response.status_code == 503
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("Service Unavailable", "search_timeout")
    assert "SEARCH_TIMEOUT" in error["message"]


def test_the_timeout_applies_to_the_search_statements_only(store, settings):
    settings.SEARCH_TIMEOUT = 3
    before = statement_timeout_now()
    during = []

    def record(execute, sql_text, params, many, context):
        if "chunk_terms" in sql_text:
            during.append(statement_timeout_now())
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(record):
        store_search(store=store, query="alpha", overrides={"mode": "lexical", "backend": "bm25"})
    assert during == ["3s"]
    assert statement_timeout_now() == before

    # Inside a caller's transaction the setting is put back before the caller goes on.
    with transaction.atomic():
        store_search(store=store, query="alpha", overrides={"mode": "lexical", "backend": "bm25"})
        assert statement_timeout_now() == before
    assert statement_timeout_now() == before
