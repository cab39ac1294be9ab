"""`/v1/vector_stores` through the official `openai` package: a vector store is a RAG store the
project owns, its files are documents ingested by the same queue, its search is ours; a project
reaches its own vector stores and the store an admin gave it, nothing else."""

from __future__ import annotations

import io
from decimal import Decimal

import openai
import pytest

from tests.gateway.clients.test_v1_responses import sdk_for
from tests.helpers import PLANTED_FACT, wait_for_logs

COMET = b"# Comet\n\nThe comet release ships on Friday with the new dashboard."
ORBIT = b"# Orbit\n\nThe orbit service keeps satellites in place around the moon."
# Read as a PDF by its first bytes, and unreadable after them.
CORRUPT_PDF = b"%PDF-1.7\n" + b"\x00\xff broken" * 200


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    client = sdk_for(asgi_url, project_key)
    yield client
    client.close()


def upload(sdk, name: str, data: bytes):
    return sdk.files.create(file=(name, io.BytesIO(data)), purpose="assistants")


def test_a_vector_store_is_a_store_of_the_project_created_listed_changed_and_deleted(sdk, project):
    from stores.models import RagStore

    created = sdk.vector_stores.create(
        name="Team notes",
        metadata={"team": "comet"},
        expires_after={"anchor": "last_active_at", "days": 7},
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50}},
    )
    assert created.id.startswith("vs_") and (created.object, created.status) == ("vector_store", "completed")
    assert (created.name, created.metadata, created.usage_bytes) == ("Team notes", {"team": "comet"}, 0)
    assert created.file_counts.total == 0 and created.expires_after.days == 7
    assert created.expires_at == created.last_active_at + 7 * 86400
    store = RagStore.objects.get(name=f"falcon-bot / {created.id}")
    assert (store.chunk_size, store.chunk_overlap, store.top_k) == (800, 200, 5)

    listed = {vs.id: vs for vs in sdk.vector_stores.list()}
    assert created.id in listed and len(listed) == 2
    [given] = [vs for vs in listed.values() if vs.id != created.id]
    # The store an admin gave the project, under its own name, with its handbook.
    assert (given.name, given.usage_bytes > 0) == ("falcon", True)
    assert [vs.id for vs in sdk.vector_stores.list()] == list(listed)  # the same row each time

    changed = sdk.vector_stores.update(created.id, name="Renamed", metadata={"team": "orbit"}, expires_after=None)
    assert (changed.name, changed.metadata, changed.expires_at) == ("Renamed", {"team": "orbit"}, None)
    assert sdk.vector_stores.retrieve(created.id).name == "Renamed"
    store.refresh_from_db()
    assert store.name == f"falcon-bot / {created.id}"  # the store keeps its own name

    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk.vector_stores.delete(given.id)
    assert refused.value.code == "given_store" and RagStore.objects.filter(pk=project.store_id).exists()
    assert sdk.vector_stores.delete(created.id).deleted
    assert not RagStore.objects.filter(pk=store.pk).exists()
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.retrieve(created.id)
    rows = wait_for_logs(8, project=project)
    assert {row.endpoint for row in rows} == {"vector_stores"} and len(rows) == 8


def test_a_file_uploaded_and_polled_is_searched_with_filters(sdk, project, ingesting):
    vector_store = sdk.vector_stores.create(name="notes")
    comet = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=vector_store.id, file=("comet.md", io.BytesIO(COMET)), attributes={"team": "comet"}
    )
    assert (comet.status, comet.last_error, comet.attributes) == ("completed", None, {"team": "comet"})
    assert comet.usage_bytes == len(COMET) and comet.chunking_strategy.type == "static"
    orbit = upload(sdk, "orbit.md", ORBIT)
    sdk.vector_stores.files.create_and_poll(orbit.id, vector_store_id=vector_store.id, attributes={"team": "orbit"})
    assert sdk.vector_stores.retrieve(vector_store.id).file_counts.completed == 2

    found = sdk.vector_stores.search(vector_store.id, query="When does the comet release ship?")
    assert found.data[0].file_id == comet.id and found.data[0].filename == "comet.md"
    assert "Friday" in found.data[0].content[0].text and found.data[0].attributes == {"team": "comet"}
    only_orbit = sdk.vector_stores.search(
        vector_store.id,
        query=["release", "ship"],
        filters={"type": "eq", "key": "team", "value": "orbit"},
        max_num_results=3,
        ranking_options={"score_threshold": 0.5},
        rewrite_query=True,
    )
    assert {hit.file_id for hit in only_orbit.data} <= {orbit.id}
    assert only_orbit.search_query == ["release", "ship"]

    sdk.vector_stores.files.update(comet.id, vector_store_id=vector_store.id, attributes={"team": "orbit"})
    refiltered = sdk.vector_stores.search(
        vector_store.id, query="comet release", filters={"type": "eq", "key": "team", "value": "orbit"}
    )
    assert comet.id in {hit.file_id for hit in refiltered.data}

    searches = wait_for_logs(3, project=project, endpoint="vector_stores", embedding_tokens__gt=0)
    assert len(searches) == 3 and {row.model for row in searches} == {"text-embedding-3-small"}
    assert searches[0].rag_hits >= 1 and searches[0].sources[0]["filename"] == "comet.md"


def test_the_given_store_is_searched_and_its_dashboard_documents_have_a_stable_file_id(sdk, project, ingesting):
    from gateway.clients.vector_store_ids import document_file_id
    from stores.models import Document

    [given] = sdk.vector_stores.list()
    found = sdk.vector_stores.search(given.id, query="launch code Project Falcon")
    [handbook] = Document.objects.filter(store=project.store)
    assert found.data[0].file_id == document_file_id(handbook.pk) and found.data[0].filename == "handbook.md"
    assert PLANTED_FACT in found.data[0].content[0].text

    # A key attaches files to the given store as to its own, and they are documents of that store.
    comet = sdk.vector_stores.files.upload_and_poll(vector_store_id=given.id, file=("comet.md", io.BytesIO(COMET)))
    assert comet.status == "completed" and Document.objects.filter(store=project.store).count() == 2
    [hit, *_] = sdk.vector_stores.search(given.id, query="comet release Friday").data
    assert (hit.file_id, hit.filename) == (comet.id, "comet.md")
    sdk.vector_stores.files.delete(comet.id, vector_store_id=given.id)
    assert list(Document.objects.filter(store=project.store)) == [handbook]


def test_a_vector_store_created_with_files_attaches_them(sdk, ingesting):
    ids = [upload(sdk, "comet.md", COMET).id, upload(sdk, "orbit.md", ORBIT).id]
    vector_store = sdk.vector_stores.create(name="notes", file_ids=ids)
    assert vector_store.file_counts.total == 2
    attached = sdk.vector_stores.files.list(vector_store.id, order="asc")
    assert [f.id for f in attached] == ids
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.create(name="bad", file_ids=[ids[0], "file-" + "0" * 24])


def test_a_key_with_a_document_scope_searches_within_it_and_reaches_nothing_else(asgi_url, sdk, project):
    from gateway.clients.services import key_create
    from retrieval.filters import parse_filter

    [given] = sdk.vector_stores.list()
    acme = parse_filter({"type": "eq", "key": "customer", "value": "acme"})
    scoped = sdk_for(asgi_url, key_create(project=project, name="acme", scopes=None, expires_at=None, filters=acme).key)

    assert sdk.vector_stores.search(given.id, query="launch code").data  # the handbook, for a whole-store key
    assert scoped.vector_stores.search(given.id, query="launch code").data == []  # not a document of acme's
    for reach in (
        scoped.files.list,
        scoped.vector_stores.list,
        lambda: scoped.vector_stores.retrieve(given.id),
        lambda: scoped.vector_stores.files.list(given.id),
        lambda: scoped.vector_stores.create(name="acme's"),
    ):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            reach()
        assert refused.value.code == "document_scoped_key"


def test_a_search_is_priced_and_limited_as_a_retrieval(sdk, project):
    from gateway.clients.models import Project
    from gateway.connections.models import ModelPrice

    ModelPrice.objects.filter(provider_type="openai", model="text-embedding-3-small").update(
        input_per_mtok=Decimal(1000)
    )
    [given] = sdk.vector_stores.list()
    sdk.vector_stores.search(given.id, query="launch code")
    [*_, row] = wait_for_logs(2, project=project)
    assert (row.endpoint, row.cost_source) == ("vector_stores", "price_table")
    assert row.embedding_tokens > 0 and row.cost_micros == row.embedding_tokens * 1000
    Project.objects.filter(pk=project.pk).update(budget_daily_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.vector_stores.search(given.id, query="launch code")
    assert "budget" in refused.value.message


def test_a_file_that_cannot_be_read_fails_with_its_reason(sdk, ingesting):
    vector_store = sdk.vector_stores.create(name="notes")
    failed = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=vector_store.id, file=("broken.pdf", io.BytesIO(CORRUPT_PDF))
    )
    assert failed.status == "failed" and failed.last_error.code == "invalid_file" and failed.last_error.message
    good = sdk.vector_stores.files.upload_and_poll(vector_store_id=vector_store.id, file=("c.md", io.BytesIO(COMET)))

    [listed] = sdk.vector_stores.files.list(vector_store.id, filter="failed")
    assert (listed.id, listed.last_error.message) == (failed.id, failed.last_error.message)
    assert [f.id for f in sdk.vector_stores.files.list(vector_store.id, filter="completed")] == [good.id]
    assert [f.id for f in sdk.vector_stores.files.list(vector_store.id, order="asc")] == [failed.id, good.id]
    counts = sdk.vector_stores.retrieve(vector_store.id).file_counts
    assert (counts.completed, counts.failed, counts.total) == (1, 1, 2)


def test_a_file_over_the_store_quota_or_already_in_it_fails_with_why(sdk):
    from stores.models import RagStore

    vector_store = sdk.vector_stores.create(name="small")
    RagStore.objects.filter(name__endswith=vector_store.id).update(max_bytes=len(COMET) + 10)
    comet = sdk.vector_stores.files.create(vector_store_id=vector_store.id, file_id=upload(sdk, "comet.md", COMET).id)
    assert comet.status == "in_progress"
    again = sdk.vector_stores.files.create(vector_store_id=vector_store.id, file_id=comet.id)
    assert again.id == comet.id  # attached once

    twin = sdk.vector_stores.files.create(vector_store_id=vector_store.id, file_id=upload(sdk, "twin.md", COMET).id)
    assert (twin.status, twin.last_error.code) == ("failed", "invalid_file")
    assert "identical" in twin.last_error.message
    over = sdk.vector_stores.files.create(vector_store_id=vector_store.id, file_id=upload(sdk, "orbit.md", ORBIT).id)
    assert over.status == "failed" and "store quota exceeded" in over.last_error.message


def test_a_file_batch_is_attached_polled_listed_and_a_waiting_one_cancelled(sdk, project, ingesting):
    vector_store = sdk.vector_stores.create(name="batches")
    ids = [upload(sdk, "comet.md", COMET).id, upload(sdk, "orbit.md", ORBIT).id]
    batch = sdk.vector_stores.file_batches.create_and_poll(vector_store.id, file_ids=ids, attributes={"kind": "note"})
    assert batch.id.startswith("vsfb_") and (batch.status, batch.file_counts.completed) == ("completed", 2)
    listed = sdk.vector_stores.file_batches.list_files(batch.id, vector_store_id=vector_store.id)
    assert sorted(f.id for f in listed) == sorted(ids) and {f.attributes["kind"] for f in listed} == {"note"}


def test_cancelling_a_batch_cancels_the_files_still_waiting(sdk):
    from stores.models import Document

    vector_store = sdk.vector_stores.create(name="batches")
    ids = [upload(sdk, "comet.md", COMET).id]
    batch = sdk.vector_stores.file_batches.create(vector_store.id, files=[{"file_id": ids[0], "attributes": {"n": 1}}])
    assert batch.status == "in_progress"
    cancelled = sdk.vector_stores.file_batches.cancel(batch.id, vector_store_id=vector_store.id)
    assert (cancelled.status, cancelled.file_counts.cancelled) == ("cancelled", 1)
    [file] = sdk.vector_stores.files.list(vector_store.id, filter="cancelled")
    assert file.id == ids[0] and not Document.objects.filter(store__name__endswith=vector_store.id).exists()


def test_detaching_a_file_removes_its_document_from_the_store(sdk):
    from stores.models import Document

    vector_store = sdk.vector_stores.create(name="notes")
    attached = sdk.vector_stores.files.create(vector_store_id=vector_store.id, file_id=upload(sdk, "c.md", COMET).id)
    assert Document.objects.filter(store__name__endswith=vector_store.id).count() == 1
    gone = sdk.vector_stores.files.delete(attached.id, vector_store_id=vector_store.id)
    assert (gone.object, gone.deleted) == ("vector_store.file.deleted", True)
    assert not Document.objects.filter(store__name__endswith=vector_store.id).exists()
    assert sdk.files.retrieve(attached.id).id == attached.id  # the file itself stays
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.files.retrieve(attached.id, vector_store_id=vector_store.id)


def test_another_projects_key_reaches_none_of_the_vector_stores(asgi_url, sdk, other_project, key_of):
    own = sdk.vector_stores.create(name="mine")
    [given] = [vs for vs in sdk.vector_stores.list() if vs.id != own.id]
    attached = sdk.vector_stores.files.create(vector_store_id=own.id, file_id=upload(sdk, "c.md", COMET).id)
    outsider = sdk_for(asgi_url, key_of(other_project))

    assert list(outsider.vector_stores.list()) == []
    reaches = (
        lambda vector_store_id: outsider.vector_stores.retrieve(vector_store_id),
        lambda vector_store_id: outsider.vector_stores.search(vector_store_id, query="comet"),
        lambda vector_store_id: outsider.vector_stores.files.list(vector_store_id),
        lambda vector_store_id: outsider.vector_stores.update(vector_store_id, name="mine now"),
        lambda vector_store_id: outsider.vector_stores.delete(vector_store_id),
    )
    for vector_store_id in (own.id, given.id):
        for reach in reaches:
            with pytest.raises(openai.NotFoundError):
                reach(vector_store_id)
    with pytest.raises(openai.NotFoundError):
        outsider.vector_stores.files.retrieve(attached.id, vector_store_id=own.id)
    # Its own vector store cannot take this project's file either.
    theirs = outsider.vector_stores.create(name="theirs")
    with pytest.raises(openai.NotFoundError):
        outsider.vector_stores.files.create(vector_store_id=theirs.id, file_id=attached.id)


def test_the_scopes_read_and_write_separately(asgi_url, v1, sdk, project, key_of):
    own = sdk.vector_stores.create(name="mine")
    reader = sdk_for(asgi_url, key_of(project, ["files_read"]))
    chat_only = sdk_for(asgi_url, key_of(project, ["chat"]))

    assert reader.vector_stores.retrieve(own.id).id == own.id
    assert reader.vector_stores.search(own.id, query="anything").data == []
    for write in (
        lambda: reader.vector_stores.create(name="x"),
        lambda: reader.vector_stores.update(own.id, name="x"),
        lambda: reader.vector_stores.delete(own.id),
        lambda: reader.vector_stores.files.create(vector_store_id=own.id, file_id="file-" + "0" * 24),
        lambda: reader.vector_stores.file_batches.create(own.id, file_ids=["file-" + "0" * 24]),
        lambda: chat_only.vector_stores.search(own.id, query="anything"),
        lambda: chat_only.vector_stores.list(),
    ):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            write()
        assert refused.value.code == "insufficient_scope"
    client = v1()
    assert client.get("/vector_stores").status_code == 401
    assert client.post(f"/vector_stores/{own.id}/search", json={"query": "x"}).status_code == 401


FILE = "<the id of a file of the project>"


def with_file_id(value, file_id: str):
    """``value`` with FILE replaced by ``file_id`` wherever it stands."""
    if value == FILE:
        return file_id
    if isinstance(value, list):
        return [with_file_id(item, file_id) for item in value]
    if isinstance(value, dict):
        return {key: with_file_id(item, file_id) for key, item in value.items()}
    return value


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("", {"name": 123}),
        ("", {"name": "a\x00b"}),
        ("", {"metadata": {f"k{i}": "v" for i in range(17)}}),
        ("", {"metadata": {"k": "v\x00"}}),
        ("", {"metadata": {"k": 5}}),
        ("", {"file_ids": "file-x"}),
        ("", {"expires_after": {"anchor": "created_at", "days": 1}}),
        ("", {"expires_after": {"anchor": "last_active_at", "days": 10**30}}),
        (
            "",
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 101},
                }
            },
        ),
        ("", {"chunking_strategy": {"type": "static"}}),
        ("", {"chunking_strategy": {"type": "other"}}),
        ("/{vs}/search", {"query": 123}),
        ("/{vs}/search", {"query": []}),
        ("/{vs}/search", {"query": "a\x00b"}),
        ("/{vs}/search", {"query": "x" * 5000}),
        ("/{vs}/search", {"query": "x", "max_num_results": 10**20}),
        ("/{vs}/search", {"query": "x", "max_num_results": 0}),
        ("/{vs}/search", {"query": "x", "filters": {"type": "eq", "key": "a"}}),
        ("/{vs}/search", {"query": "x", "filters": {"type": "and", "filters": "no"}}),
        ("/{vs}/search", {"query": "x", "ranking_options": {"score_threshold": 7}}),
        ("/{vs}/files", {"file_id": 5}),
        ("/{vs}/files", {"file_id": FILE, "attributes": {"tags": "x"}}),
        ("/{vs}/files", {"file_id": FILE, "attributes": {"k": 2**60}}),
        ("/{vs}/file_batches", {"file_ids": []}),
        ("/{vs}/file_batches", {"file_ids": [FILE], "files": [{"file_id": FILE}]}),
        ("/{vs}/file_batches", {"file_ids": ["x"] * 501}),
    ],
)
def test_hostile_bodies_are_400s_in_the_envelope(v1, sdk, project_key, path, body):
    own = sdk.vector_stores.create(name="mine")
    file_id = upload(sdk, "c.md", COMET).id
    answer = v1(project_key).post(f"/vector_stores{path.replace('{vs}', own.id)}", json=with_file_id(body, file_id))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/vector_stores/vs_unknown"),
        ("GET", "/vector_stores/" + "vs_" + "0" * 24),
        ("POST", "/vector_stores/vs_%00/search"),
        ("GET", "/vector_stores/{vs}/files/file-unknown"),
        ("DELETE", "/vector_stores/{vs}/files/" + "file-" + "0" * 24),
        ("GET", "/vector_stores/{vs}/file_batches/vsfb_unknown"),
        ("POST", "/vector_stores/{vs}/file_batches/" + "vsfb_" + "0" * 24 + "/cancel"),
        ("GET", "/vector_stores/{vs}/file_batches/vsfb_x/files"),
    ],
)
def test_unknown_ids_are_404s(v1, sdk, project_key, method, path):
    own = sdk.vector_stores.create(name="mine")
    answer = v1(project_key).request(method, path.replace("{vs}", own.id), json={"query": "x"})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=101", "limit=1e3", "order=sideways", "after=vs_nope", "before=vs_x", "filter=done"]
)
def test_bad_list_queries_are_400s(v1, sdk, project_key, query):
    own = sdk.vector_stores.create(name="mine")
    client = v1(project_key)
    for path in ("/vector_stores", f"/vector_stores/{own.id}/files"):
        if query.startswith("filter") and path == "/vector_stores":
            continue
        answer = client.get(f"{path}?{query}")
        assert answer.status_code == 400, (path, answer.text)


def test_a_body_that_is_not_json_is_refused(v1, sdk, project_key):
    own = sdk.vector_stores.create(name="mine")
    client = v1(project_key)
    for path in ("/vector_stores", f"/vector_stores/{own.id}/search", f"/vector_stores/{own.id}/files"):
        answer = client.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_json"
        answer = client.post(path, content=b"[]", headers={"Content-Type": "application/json"})
        assert answer.status_code == 400


@pytest.mark.parametrize(
    "method, path",
    [
        ("PUT", "/vector_stores"),
        ("PATCH", "/vector_stores/{vs}"),
        ("GET", "/vector_stores/{vs}/search"),
        ("PUT", "/vector_stores/{vs}/files"),
        ("PUT", "/vector_stores/{vs}/files/file-x"),
        ("GET", "/vector_stores/{vs}/file_batches"),
        ("DELETE", "/vector_stores/{vs}/file_batches/vsfb_x"),
        ("GET", "/vector_stores/{vs}/file_batches/vsfb_x/cancel"),
        ("POST", "/vector_stores/{vs}/file_batches/vsfb_x/files"),
    ],
)
def test_a_method_a_route_does_not_take_is_a_405_in_the_envelope(v1, sdk, project_key, method, path):
    own = sdk.vector_stores.create(name="mine")
    answer = v1(project_key).request(method, path.replace("{vs}", own.id))
    assert answer.status_code == 405, answer.text
    assert "error" in answer.json()
