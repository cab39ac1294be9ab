"""The dashboard's pages and forms through Django's test client: roles, outcomes, validation,
escaping and the number of SQL queries each page runs."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ingestion.services import IncomingFile, document_upload
from ragmux.dashboard.lexical_index import LexicalIndex
from stores.models import Document, RagStore
from stores.rebuild import LexicalIndexState, lexical_index_rebuild
from stores.services import store_update
from tests.factories import DocumentFactory, StoreFactory
from tests.helpers import post

pytestmark = pytest.mark.django_db


def upload(client, store, *named, fragment=True):
    from django.core.files.uploadedfile import SimpleUploadedFile

    files = [SimpleUploadedFile(name, data) for name, data in named]
    headers = {"HTTP_HX_REQUEST": "true"} if fragment else {}
    return post(client, f"/admin/stores/{store.pk}/upload", {"files": files}, **headers)


def outcomes(response) -> list[str]:
    """Each file's line of an upload's result, as text."""
    html = response.content.decode()
    items = re.findall(r"<li[^>]*>(.*?)</li>", html, re.S)
    return [" ".join(unescape(re.sub(r"<[^>]+>", "", item)).split()) for item in items]


# --- roles ------------------------------------------------------------------------------------


def test_strangers_are_sent_to_sign_in(client, kb):
    for url in ("/admin/", "/admin/stores/", f"/admin/stores/{kb.pk}/", "/admin/search/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_each_role_sees_only_the_controls_it_may_use(as_role, kb):
    DocumentFactory(store=kb, status="failed", error="boom", error_stage="parse")
    pages = {
        role: as_role(role).get(f"/admin/stores/{kb.pk}/").content.decode() for role in ("viewer", "editor", "admin")
    }
    controls = {
        "upload": 'name="files"',
        "text": "Add the text",
        "retry": "Retry all failed (1)",
        "delete document": "/delete",
        "settings": "/settings",
    }
    seen = {role: {name for name, marker in controls.items() if marker in html} for role, html in pages.items()}
    assert seen["viewer"] == set()
    assert seen["editor"] == {"upload", "text", "retry", "delete document"}
    assert seen["admin"] == set(controls)
    for html in pages.values():
        assert "Download" in html


def test_a_user_without_a_role_gets_a_readable_403(as_role, caplog):
    response = as_role("outsider").get("/admin/")
    assert response.status_code == 403
    assert "Your account has no role yet" in response.content.decode()
    # A refusal is an answer, not an error: nothing in the log carries a traceback.
    assert not any(record.exc_info for record in caplog.records)


@pytest.mark.parametrize(
    ("role", "path", "data"),
    [
        ("viewer", "/admin/stores/{store}/upload", {}),
        ("viewer", "/admin/stores/{store}/text", {"title": "t", "content": "c"}),
        ("viewer", "/admin/stores/{store}/reprocess", {"status": "failed"}),
        ("viewer", "/admin/documents/{document}/reprocess", {}),
        ("viewer", "/admin/documents/{document}/delete", {}),
        ("editor", "/admin/stores/new", {"name": "forged"}),
        ("editor", "/admin/stores/{store}/settings", {"name": "forged"}),
        ("editor", "/admin/stores/{store}/delete", {"confirm_name": "kb"}),
        ("editor", "/admin/stores/{store}/search-settings", {"side": "a", "mode": "vector"}),
    ],
)
def test_a_forged_post_with_a_valid_token_from_the_wrong_role_is_refused(as_role, kb, role, path, data):
    document = DocumentFactory(store=kb)
    client = as_role(role)
    response = post(client, path.format(store=kb.pk, document=document.pk), data)
    assert response.status_code == 403
    assert "Not allowed" in response.content.decode()
    kb.refresh_from_db()
    assert kb.name == "kb" and kb.search_mode == "hybrid"
    assert list(Document.objects.values_list("pk", "status")) == [(document.pk, "pending")]
    assert not RagStore.objects.filter(name="forged").exists()


def test_missing_objects_get_the_404_page(as_role):
    response = as_role("admin").get("/admin/stores/987/")
    assert response.status_code == 404
    assert "Not found" in response.content.decode()


# --- uploads and documents --------------------------------------------------------------------


def test_an_upload_says_what_happened_to_each_file(as_role, kb):
    editor = as_role("editor")
    first = upload(editor, kb, ("notes.md", b"# Notes\n\nSome notes."))
    assert outcomes(first) == ["notes.md: accepted — queued for ingestion"]
    second = upload(
        editor, kb, ("again.md", b"# Notes\n\nSome notes."), ("tool.exe", b"MZ\x90\x00"), ("new.txt", b"new")
    )
    lines = outcomes(second)
    assert lines[0] == "new.txt: accepted — queued for ingestion"
    assert lines[1].startswith("again.md: duplicate —") and '("notes.md")' in lines[1]
    assert lines[2].startswith("tool.exe: unsupported format —")


def test_an_upload_over_quota_names_the_file_that_did_not_fit_and_those_not_reached(as_role, kb):
    kb.max_documents = 1
    kb.save()
    lines = outcomes(upload(as_role("editor"), kb, ("a.txt", b"a"), ("b.txt", b"b"), ("c.txt", b"c")))
    assert lines == [
        "a.txt: accepted — queued for ingestion",
        "b.txt: over quota — store quota exceeded: 1 of 1 documents",
        "c.txt: not stored — the upload stopped at the file over quota",
    ]


def test_a_full_backlog_is_said_per_file(as_role, kb, settings):
    settings.MAX_PENDING_DOCUMENTS = 1
    DocumentFactory(store=kb)
    (line,) = outcomes(upload(as_role("editor"), kb, ("late.txt", b"late")))
    assert line.startswith("late.txt: backlog full — the ingestion backlog is full")


def test_an_upload_without_script_flashes_its_outcome(as_role, kb):
    editor = as_role("editor")
    response = upload(editor, kb, ("a.txt", b"a"), ("a-again.txt", b"a"), fragment=False)
    assert response.status_code == 302
    page = editor.get(response["Location"]).content.decode()
    assert "Upload: 1 accepted, 1 duplicate (2 files)." in page


def test_pasted_text_becomes_a_document_and_a_bad_one_keeps_the_form(as_role, kb):
    editor = as_role("editor")
    response = post(
        editor, f"/admin/stores/{kb.pk}/text", {"title": "Tide notes", "content": "Low water.", "tags": "a, b"}
    )
    assert response.status_code == 302
    assert "Tide notes.txt: accepted, queued for ingestion." in editor.get(response["Location"]).content.decode()
    assert Document.objects.get(store=kb).tags == ["a", "b"]
    refused = post(editor, f"/admin/stores/{kb.pk}/text", {"title": "", "content": "kept text"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert 'id="text-title-errors"' in html and "kept text</textarea>" in html


def test_retry_all_failed_requeues_only_the_failed(as_role, kb):
    failed = DocumentFactory(store=kb, status="failed", error="boom", error_stage="embed")
    ready = DocumentFactory(store=kb, status="ready")
    editor = as_role("editor")
    response = post(editor, f"/admin/stores/{kb.pk}/reprocess", {"status": "failed"})
    assert "1 failed document queued for reprocessing." in editor.get(response["Location"]).content.decode()
    assert Document.objects.get(pk=failed.pk).status == "pending"
    assert Document.objects.get(pk=ready.pk).status == "ready"


def test_a_document_is_reprocessed_and_deleted(as_role, kb):
    document = DocumentFactory(store=kb, status="failed", filename="old.txt")
    editor = as_role("editor")
    post(editor, f"/admin/documents/{document.pk}/reprocess")
    assert Document.objects.get(pk=document.pk).status == "pending"
    response = post(editor, f"/admin/documents/{document.pk}/delete")
    assert "Deleted old.txt with its chunks." in editor.get(response["Location"]).content.decode()
    assert not Document.objects.filter(pk=document.pk).exists()


@pytest.mark.parametrize(
    ("place", "back"),
    [
        ("?status=failed&page=2", "?status=failed&page=2"),
        ("status=failed", "?status=failed"),
        ("", ""),
        # Refused, or not ours to echo: the first page of everything.
        ("?status=gone", ""),
        ("?page=-3", ""),
        ("//evil.example/?status=failed", ""),
        ("https://evil.example/", ""),
        ("?status=failed&next=https://evil.example/", "?status=failed"),
        ("?page=2\x00", ""),
    ],
)
def test_an_action_returns_to_the_place_in_the_list_it_was_sent_from(as_role, kb, place, back):
    document = DocumentFactory(store=kb, status="failed")
    response = post(as_role("editor"), f"/admin/documents/{document.pk}/reprocess", {"place": place})
    assert response.status_code == 302
    assert response["Location"] == f"/admin/stores/{kb.pk}/{back}"


def test_the_document_table_filters_pages_and_polls_only_while_documents_move(as_role, kb):
    for n in range(60):
        DocumentFactory(store=kb, status="ready", filename=f"doc-{n:02}.txt")
    viewer = as_role("viewer")
    first = viewer.get(f"/admin/stores/{kb.pk}/documents").content.decode()
    assert "every 2s" not in first and "Page 1 of 2 (60 documents)" in first
    assert "doc-59.txt" in first and "doc-09.txt" not in first
    second = viewer.get(f"/admin/stores/{kb.pk}/documents?page=2").content.decode()
    assert "doc-09.txt" in second and "doc-59.txt" not in second
    past = viewer.get(f"/admin/stores/{kb.pk}/documents?page=9").content.decode()
    assert "Page 2 of 2 (60 documents)" in past and "doc-09.txt" in past and 'rel="next"' not in past
    DocumentFactory(store=kb, status="processing", filename="moving.txt", progress_percent=40)
    polled = viewer.get(f"/admin/stores/{kb.pk}/documents?status=processing").content.decode()
    assert "every 2s" in polled and "moving.txt" in polled and "doc-59.txt" not in polled
    assert 'value="40"' in polled and 'hx-swap-oob="true"' in polled


def test_the_document_table_says_how_many_pages_ocr_read_and_lists_the_warnings(as_role, kb):
    DocumentFactory(
        store=kb,
        status="ready",
        filename="minutes.pdf",
        page_count=4,
        ocr_pages=3,
        warnings=["page 2 was skipped: OCR took longer than 60s (OCR_PAGE_TIMEOUT)"],
    )
    DocumentFactory(store=kb, status="ready", filename="plain.txt")
    html = as_role("viewer").get(f"/admin/stores/{kb.pk}/documents").content.decode()
    assert '<small class="ocr" data-ocr-pages="3">OCR: 3 pages</small>' in html
    assert html.count("data-ocr-pages") == 1
    assert "<li>page 2 was skipped: OCR took longer than 60s (OCR_PAGE_TIMEOUT)</li>" in html


def test_the_upload_form_says_whether_ocr_reads_scans_and_accepts_every_format(as_role, kb):
    html = as_role("editor").get(f"/admin/stores/{kb.pk}/").content.decode()
    assert "Scanned PDF pages and images are read by OCR (eng)" in html
    assert 'accept=".pdf,.docx,.pptx,.xlsx,.csv,.epub,.eml,' in html
    RagStore.objects.filter(pk=kb.pk).update(ocr=False)
    html = as_role("editor").get(f"/admin/stores/{kb.pk}/").content.decode()
    assert "OCR is off for this store: scanned PDFs fail and images are not read." in html


# --- stores -----------------------------------------------------------------------------------


def test_store_form_errors_stand_beside_their_fields(as_role, fake_connection):
    admin = as_role("admin")
    data = {"name": "s", "embedding_connection_id": fake_connection.pk, "chunk_size": "100", "fusion_vector": "0"}
    response = post(admin, "/admin/stores/new", {**data, "fusion_lexical": "0"})
    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(r'id="errors_chunk_size">chunk_size must be between 200 and 20000', html)
    assert "Vector weight and Lexical weight cannot both be 0" in html and "fusion_weights" not in html
    assert "The store was not created" in html
    StoreFactory(name="taken", embedding_connection=fake_connection)
    duplicate = post(admin, "/admin/stores/new", {"name": "taken", "embedding_connection_id": fake_connection.pk})
    assert re.search(r'id="errors_name">a store named &#x27;taken&#x27; already exists', duplicate.content.decode())


def test_changing_chunking_recommends_reprocessing_with_a_button(as_role, kb):
    DocumentFactory(store=kb)
    admin = as_role("admin")
    form = admin.get(f"/admin/stores/{kb.pk}/settings").content.decode()
    assert 'id="id_rerank"' in form and "llm: the project&#x27;s own chat model" in form
    values = {
        "name": "kb",
        "embedding_connection_id": kb.embedding_connection_id,
        "chunk_size": "400",
        "chunk_overlap": "0",
        "fusion_vector": "1",
        "fusion_lexical": "2",
    }
    response = post(admin, f"/admin/stores/{kb.pk}/settings", values)
    assert response["Location"].endswith("?reprocess=recommended")
    page = admin.get(response["Location"]).content.decode()
    assert "Saved the settings of “kb”." in page and "Reprocess all</button>" in page
    kb.refresh_from_db()
    assert (kb.chunk_size, kb.fusion_weights) == (400, {"vector": 1.0, "lexical": 2.0})


def index_language_options(html: str) -> tuple[list[str], str]:
    """The options of the settings form's index language, and the one selected."""
    select = re.search(r'<select id="id_index_config".*?</select>', html, re.S).group(0)
    options = re.findall(r'<option value="([^"]+)"', select)
    (selected,) = re.findall(r'<option value="([^"]+)" selected', select)
    return options, selected


def lexical_state(html: str) -> str:
    return re.search(r'<span id="lexical-index"[^>]*>([^<]*)</span>', html).group(1)


def test_the_settings_form_offers_the_servers_text_search_configurations(as_role, kb):
    from stores.backends import text_search_configs

    admin = as_role("admin")
    for url in (f"/admin/stores/{kb.pk}/settings", "/admin/stores/new"):
        html = admin.get(url).content.decode()
        options, selected = index_language_options(html)
        assert options == text_search_configs() and {"simple", "english", "german"} <= set(options)
        assert selected == "english"
        assert "rebuilds the lexical index in the background" in html
        assert "only while the index language is simple" in html
        assert "pg_search ignores it. Default: english.</p>" in html
    assert lexical_state(admin.get(f"/admin/stores/{kb.pk}/settings").content.decode()) == "english — ready"


def test_changing_the_index_language_shows_the_rebuild_until_it_is_ready(as_role, kb):
    admin = as_role("admin")
    values = {"name": "kb", "embedding_connection_id": kb.embedding_connection_id, "index_config": "simple"}
    response = post(admin, f"/admin/stores/{kb.pk}/settings", values)
    assert response.status_code == 302 and not response["Location"].endswith("?reprocess=recommended")
    form = unescape(admin.get(response["Location"]).content.decode())
    assert "Its lexical index is being rebuilt in simple in the background" in form
    assert index_language_options(form)[1] == "simple"
    assert lexical_state(form) == "rebuilding from english to simple: queued"
    page = admin.get(f"/admin/stores/{kb.pk}/").content.decode()
    assert lexical_state(page) == "rebuilding from english to simple: queued"
    polled = admin.get(f"/admin/stores/{kb.pk}/lexical-index").content.decode()
    assert 'hx-trigger="every 2s"' in polled and 'data-state="rebuilding"' in polled

    assert lexical_index_rebuild(store_id=kb.pk) == "rebuilt"
    polled = admin.get(f"/admin/stores/{kb.pk}/lexical-index").content.decode()
    assert lexical_state(polled) == "simple — ready"
    assert "hx-trigger" not in polled  # the answer that says ready ends the polling
    assert lexical_state(admin.get(f"/admin/stores/{kb.pk}/").content.decode()) == "simple — ready"
    documents = admin.get(f"/admin/stores/{kb.pk}/documents").content.decode()
    assert lexical_state(documents) == "simple — ready"  # the quota card it sends out of band


def test_an_unknown_index_language_is_refused_beside_its_field(as_role, kb):
    values = {"name": "kb", "embedding_connection_id": kb.embedding_connection_id, "index_config": "klingon"}
    response = post(as_role("admin"), f"/admin/stores/{kb.pk}/settings", values)
    assert response.status_code == 400
    html = unescape(response.content.decode())
    assert 'id="errors_index_config">index_config "klingon" is not a text search configuration' in html
    kb.refresh_from_db()
    assert (kb.index_config, kb.indexed_config) == ("english", "english")


def test_a_viewer_sees_the_rebuild_but_cannot_change_the_index_language(as_role, kb):
    store_update(store=kb, name="kb", values={"index_config": "german"})
    viewer = as_role("viewer")
    assert lexical_state(viewer.get(f"/admin/stores/{kb.pk}/").content.decode()) == (
        "rebuilding from english to german: queued"
    )
    assert viewer.get(f"/admin/stores/{kb.pk}/lexical-index").status_code == 200
    assert viewer.get(f"/admin/stores/{kb.pk}/settings").status_code == 403
    values = {"name": "kb", "embedding_connection_id": kb.embedding_connection_id, "index_config": "simple"}
    assert post(viewer, f"/admin/stores/{kb.pk}/settings", values).status_code == 403
    kb.refresh_from_db()
    assert (kb.index_config, kb.indexed_config) == ("german", "english")


@pytest.mark.parametrize(
    ("state", "summary"),
    [
        (LexicalIndexState("english", "english", "ready", None, None), "english — ready"),
        (
            LexicalIndexState("simple", "english", "rebuilding", 1200, 10000),
            "rebuilding from simple to english: 1,200 of 10,000 chunks",
        ),
        (
            LexicalIndexState("", "simple", "rebuilding", None, None),
            "rebuilding from an earlier version's index to simple: queued",
        ),
    ],
)
def test_the_lexical_index_state_reads_as_a_sentence(state, summary):
    assert LexicalIndex(1, state).summary == summary


def test_deleting_a_store_names_what_is_lost_and_needs_its_name(as_role, kb):
    DocumentFactory(store=kb)
    admin = as_role("admin")
    confirmation = admin.get(f"/admin/stores/{kb.pk}/delete").content.decode()
    assert "its 1 document, with their original files" in confirmation
    assert post(admin, f"/admin/stores/{kb.pk}/delete", {"confirm_name": "nope"}).status_code == 400
    assert RagStore.objects.filter(pk=kb.pk).exists()
    response = post(admin, f"/admin/stores/{kb.pk}/delete", {"confirm_name": "kb"})
    assert "Deleted the store “kb” and its 1 documents." in admin.get(response["Location"]).content.decode()
    assert not RagStore.objects.filter(pk=kb.pk).exists()


# --- search compare ---------------------------------------------------------------------------


@pytest.fixture
def searchable(kb, ingest_now):
    files = [
        IncomingFile("markup.txt", b"Tide tables <script>alert(1)</script> & <b>bold</b> tide words."),
        IncomingFile("other.txt", b"Something about rocks and shores, and the tide once."),
    ]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    return kb


def lexical_compare(store, query="tide") -> str:
    return (
        f"/admin/search/?store={store.pk}&q={query}&a-mode=lexical&a-backend=pgvector"
        "&b-mode=lexical&b-backend=bm25&b-typo_tolerance=on"
    )


def test_search_compare_highlights_query_words_and_escapes_the_document(as_role, searchable):
    html = as_role("viewer").get(lexical_compare(searchable)).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "&amp;" in html
    assert "<mark>Tide</mark>" in html and "<mark>tide</mark>" in html
    assert 'class="backend-ran">pgvector<' in html and 'class="backend-ran">bm25<' in html
    assert "Save A as the store" not in html


def test_an_admin_saves_a_compared_configuration(as_role, searchable):
    admin = as_role("admin")
    url = lexical_compare(searchable)
    assert "Save B as the store's settings" in admin.get(url).content.decode()
    data = {"side": "b", "mode": "lexical", "backend": "pgvector", "top_k": "7", "max_distance": "0", "fusion": "rrf"}
    weights = {"vector_weight": "1", "lexical_weight": "3", "typo_tolerance": "on", "next": url}
    response = post(admin, f"/admin/stores/{searchable.pk}/search-settings", {**data, **weights})
    assert response["Location"] == url
    assert "Saved configuration B as the search settings of “kb”." in admin.get(url).content.decode()
    searchable.refresh_from_db()
    saved = (searchable.search_mode, searchable.search_backend, searchable.top_k, searchable.typo_tolerance)
    assert saved == ("lexical", "pgvector", 7, True)
    assert (searchable.fusion_weights, searchable.fusion) == ({"vector": 1.0, "lexical": 3.0}, "rrf")


def hybrid_compare(store, query="tide") -> str:
    return f"/admin/search/?store={store.pk}&q={query}&a-mode=hybrid&a-fusion=rrf&b-mode=hybrid&b-fusion=scores"


def test_search_compare_sets_rrf_and_scores_side_by_side(as_role, searchable):
    html = as_role("viewer").get(hybrid_compare(searchable)).content.decode()
    for side, chosen in (("a", "rrf"), ("b", "scores")):
        select = re.search(rf'<select id="{side}-fusion".*?</select>', html, re.S).group(0)
        assert re.findall(r"<option[^>]*>([^<]+)</option>", select) == ["scores", "rrf"]
        assert f"<option selected>{chosen}</option>" in select
    a, b = (
        [float(score) for score in re.findall(r"fused score</dt>\s*<dd>([0-9.]+)", column)]
        for column in html.split('id="column-b"')
    )
    assert a and b
    assert max(a) <= round(2 / 61, 5) < max(b)  # rank fusion's scores (shown to 5 places), then min-max


def test_a_bad_configuration_is_reported_beside_its_field(as_role, kb):
    html = as_role("viewer").get(f"/admin/search/?store={kb.pk}&q=x&a-top_k=-3&b-mode=lexical").content.decode()
    assert "Ensure this value is greater than or equal to 0." in html
    assert "Fix the settings of this configuration to run it." in html


# --- query budget -----------------------------------------------------------------------------


def page_urls(store) -> list[str]:
    return [
        "/admin/",
        "/admin/stores/",
        f"/admin/stores/{store.pk}/",
        f"/admin/stores/{store.pk}/documents",
        f"/admin/stores/{store.pk}/lexical-index",
        f"/admin/stores/{store.pk}/settings",
        f"/admin/stores/{store.pk}/delete",
        "/admin/stores/new",
        lexical_compare(store),
    ]


def queries_per_page(client, store) -> dict[str, int]:
    counts = {}
    for url in page_urls(store):
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        counts[url.split("?")[0].replace(str(store.pk), "{id}")] = len(captured)
    return counts


def test_each_page_runs_the_same_few_queries_whatever_the_data(as_role, kb):
    admin = as_role("admin")
    DocumentFactory(store=kb, status="failed", error="x", error_stage="parse")
    few = queries_per_page(admin, kb)
    for _ in range(12):
        store = StoreFactory(embedding_connection=kb.embedding_connection)
        DocumentFactory(store=store, status="failed", error="y", error_stage="embed")
    for n in range(80):
        DocumentFactory(store=kb, status=("pending", "ready", "failed")[n % 3], error="z")
    many = queries_per_page(admin, kb)
    assert many == few
    # The search compare page is the largest: two searches, each a transaction of its own with
    # its statement timeout set and reset, and the connections and routes its rerank pickers offer.
    assert max(many.values()) <= 26, many


def test_the_store_form_offers_the_rerank_routes_that_fit_the_backend(as_role, kb, rerank_connection):
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="kb-reranker", kind="rerank")
    RouteTargetFactory(route=route, connection=rerank_connection("cohere_rerank"))
    mixed = RouteFactory(name="mixed", kind="rerank")
    RouteTargetFactory(route=mixed, connection=rerank_connection("voyage_rerank"))
    RouteTargetFactory(route=mixed, connection=kb.embedding_connection)
    admin = as_role("admin")
    form = admin.get(f"/admin/stores/{kb.pk}/settings").content.decode()
    select = re.search(r'<select id="id_rerank_route_id".*?</select>', form, re.S).group(0)
    assert re.search(rf'<option value="{route.pk}" disabled hidden data-fits="cohere">kb-reranker', select)
    assert "mixed" not in select  # no one backend fits every target

    values = {"name": "kb", "embedding_connection_id": kb.embedding_connection_id, "rerank": "on"}
    saved = post(
        admin,
        f"/admin/stores/{kb.pk}/settings",
        {**values, "rerank_backend": "cohere", "rerank_route_id": str(route.pk)},
    )
    assert saved.status_code == 302
    kb.refresh_from_db()
    assert (kb.rerank_route, kb.rerank_connection) == (route, None)


def test_the_store_form_offers_the_rerank_connections_that_fit_the_backend(as_role, kb, rerank_connection):
    cohere = rerank_connection("cohere_rerank")
    admin = as_role("admin")
    form = admin.get(f"/admin/stores/{kb.pk}/settings").content.decode()
    select = re.search(r'<select id="id_rerank_connection_id".*?</select>', form, re.S).group(0)
    # The backend is llm: the chat connection is offered, the Cohere one hidden until cohere is chosen.
    assert re.search(rf'<option value="{kb.embedding_connection_id}" data-fits="llm">', select)
    assert re.search(rf'<option value="{cohere.pk}" disabled hidden data-fits="cohere">', select)
    for backend in ("llm", "cohere", "voyage"):
        assert f'<option value="{backend}"' in form
    assert 'data-filters="id_rerank_connection_id id_rerank_route_id"' in form

    values = {
        "name": "kb",
        "embedding_connection_id": kb.embedding_connection_id,
        "rerank": "on",
        "rerank_backend": "cohere",
        "rerank_connection_id": "",
    }
    refused = post(admin, f"/admin/stores/{kb.pk}/settings", values)
    assert refused.status_code == 400
    assert "rerank_connection_id is required with the cohere backend" in unescape(refused.content.decode())
    saved = post(admin, f"/admin/stores/{kb.pk}/settings", {**values, "rerank_connection_id": str(cohere.pk)})
    assert saved.status_code == 302
    kb.refresh_from_db()
    assert (kb.rerank, kb.rerank_backend, kb.rerank_connection_id) == (True, "cohere", cohere.pk)
    cleared = post(admin, f"/admin/stores/{kb.pk}/settings", {**values, "rerank_backend": "llm"})
    assert cleared.status_code == 302
    kb.refresh_from_db()
    assert (kb.rerank_backend, kb.rerank_connection_id) == ("llm", None)


def test_no_dashboard_address_answers_a_visit_with_a_bare_405(as_role, kb):
    """Every dashboard URL, visited by an admin with made-up ids: a page, a redirect or a 404,
    never 405 Method Not Allowed."""
    from django.urls import URLPattern, get_resolver

    admin = as_role("admin")
    resolver = get_resolver()
    dashboard = next(p for p in resolver.url_patterns if getattr(p, "namespace", None) == "dashboard")
    for pattern in dashboard.url_patterns:
        assert isinstance(pattern, URLPattern)
        address = "/admin/" + str(pattern.pattern).replace("<id:", "{").replace(">", "}")
        address = re.sub(r"\{[a-z_]+\}", str(kb.pk), address)
        assert admin.get(address).status_code != 405, address
    assert admin.get("/admin/logout/").status_code == 302
