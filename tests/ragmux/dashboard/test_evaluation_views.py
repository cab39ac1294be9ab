"""The store's Evaluation tab through Django's test client: who may see and use it, sets made by
hand and imported, questions judged from a search, runs started, polled, compared and saved as
the store's settings, and what each run returned question by question."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from retrieval.evaluation import services
from retrieval.models import EvaluationQuestion, EvaluationRun, EvaluationSet
from tests.factories import StoreFactory
from tests.helpers import post, text
from tests.ragmux.dashboard.conftest import address, documents, start

pytestmark = pytest.mark.django_db


# --- roles ------------------------------------------------------------------------------------


def pages(store, evaluation_set) -> list[str]:
    return [
        f"/admin/stores/{store.pk}/evaluation/",
        f"{address(evaluation_set)}",
        f"{address(evaluation_set)}questions/new?q=badges",
        f"{address(evaluation_set)}runs",
        f"{address(evaluation_set)}answers",
    ]


def test_only_admins_see_the_evaluation_pages_as_they_see_the_store_settings(as_role, client, question_set):
    store = question_set.store
    for url in [*pages(store, question_set), f"/admin/stores/{store.pk}/settings"]:
        assert as_role("admin").get(url).status_code == 200, url
        for role in ("editor", "viewer", "outsider"):
            response = as_role(role).get(url)
            assert response.status_code == 403, (role, url)
            assert "Not allowed" in response.content.decode()
        assert client.get(url)["Location"].startswith("/admin/login/")
    assert "/evaluation/" in as_role("admin").get(f"/admin/stores/{store.pk}/").content.decode()
    for role in ("editor", "viewer"):
        assert "/evaluation/" not in as_role(role).get(f"/admin/stores/{store.pk}/").content.decode()


@pytest.mark.parametrize("role", ["editor", "viewer", "outsider"])
def test_a_forged_post_from_another_role_changes_nothing(as_role, question_set, evaluate_now, role):
    store = question_set.store
    settings = (store.search_mode, store.search_backend)
    start(as_role("admin"), question_set)
    evaluate_now()
    run = EvaluationRun.objects.filter(evaluation_set=question_set).first()
    forged = as_role(role)
    posts = [
        (f"/admin/stores/{store.pk}/evaluation/new", {"name": "forged"}),
        (f"/admin/stores/{store.pk}/evaluation/import", {"import_name": "forged"}),
        (f"{address(question_set)}questions/new", {"text": "forged?"}),
        (f"{address(question_set)}runs/{run.pk}/apply", {}),
    ]
    for url, data in posts:
        assert post(forged, url, data).status_code == 403, url
    assert start(forged, question_set).status_code == 403
    assert list(EvaluationSet.objects.values_list("name", flat=True)) == ["handbook"]
    assert EvaluationQuestion.objects.count() == 3 and EvaluationRun.objects.count() == 2
    store.refresh_from_db()
    assert (store.search_mode, store.search_backend) == settings


def test_missing_sets_and_runs_get_the_404_page(as_role, question_set):
    admin = as_role("admin")
    store = question_set.store
    other = services.evaluation_set_create(store=StoreFactory(), name="elsewhere", questions=[], actor=None)
    missing = [
        f"/admin/stores/{store.pk}/evaluation/987/",
        f"/admin/stores/{store.pk}/evaluation/987/answers",
        f"/admin/stores/{store.pk}/evaluation/{other.pk}/",  # a set of another store
        "/admin/stores/987/evaluation/",
    ]
    for url in missing:
        assert admin.get(url).status_code == 404, url
    assert post(admin, f"{address(question_set)}runs/987/apply", {}).status_code == 404


# --- sets ---------------------------------------------------------------------------------------


def test_a_set_is_created_and_a_second_of_that_name_is_refused_beside_the_name(as_role, kb):
    admin = as_role("admin")
    response = post(admin, f"/admin/stores/{kb.pk}/evaluation/new", {"name": "support questions"})
    created = EvaluationSet.objects.get(store=kb)
    assert response["Location"] == address(created)
    assert "Created the evaluation set “support questions”" in text(admin.get(response["Location"]))
    assert "support questions" in text(admin.get(f"/admin/stores/{kb.pk}/evaluation/"))

    again = post(admin, f"/admin/stores/{kb.pk}/evaluation/new", {"name": "support questions"})
    assert again.status_code == 400
    assert 'id="errors_name"' in again.content.decode()
    assert EvaluationSet.objects.count() == 1


def qrels_upload(content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("test.tsv", content, content_type="text/tab-separated-values")


def import_beir(client, store, *, queries: bytes, qrels: bytes):
    """The import form's post of a set named "imported"."""
    data = {
        "import_name": "imported",
        "queries": SimpleUploadedFile("queries.jsonl", queries, content_type="application/jsonl"),
        "qrels": qrels_upload(qrels),
    }
    return post(client, f"/admin/stores/{store.pk}/evaluation/import", data)


def test_a_beir_set_is_imported_matching_corpus_ids_to_file_name_stems(as_role, handbook):
    admin = as_role("admin")
    queries = b'{"_id": "q1", "text": "Where do visitors park?"}\n{"_id": "q2", "text": "Lunch hours?"}\n'
    qrels = b"query-id\tcorpus-id\tscore\nq1\tparking\t2\nq2\tlunch\t1\nq2\tmenu\t1\n"
    response = import_beir(admin, handbook, queries=queries, qrels=qrels)
    imported = EvaluationSet.objects.get(name="imported")
    assert response["Location"] == address(imported)
    page = text(admin.get(response["Location"]))
    assert "Corpus ids matching no document here: menu." in page
    assert "Where do visitors park? (q1) parking.txt grade 2" in page


def test_a_beir_query_missing_from_queries_jsonl_is_counted_as_missing(as_role, handbook):
    admin = as_role("admin")
    queries = b'{"_id": "q1", "text": "Where do visitors park?"}\n'
    response = import_beir(admin, handbook, queries=queries, qrels=b"q1\tparking\t1\nq2\tlunch\t1\n")
    page = text(admin.get(response["Location"]))
    assert "1 query of qrels/test.tsv missing from queries.jsonl was left out: q2." in page
    assert "judged only such documents" not in page


def test_an_import_that_is_not_text_or_not_beir_is_refused_beside_its_file(as_role, handbook):
    admin = as_role("admin")
    queries = SimpleUploadedFile("queries.jsonl", b'{"_id": "q1", "text": "Where?"}\n')
    url = f"/admin/stores/{handbook.pk}/evaluation/import"
    not_text = post(admin, url, {"import_name": "x", "queries": queries, "qrels": qrels_upload(b"\xff\xfe\x00q1")})
    assert not_text.status_code == 400
    assert "qrels: the file is not UTF-8 text" in text(not_text)
    queries.seek(0)
    bad = post(admin, url, {"import_name": "x", "queries": queries, "qrels": qrels_upload(b"q1\tparking\tmany\n")})
    assert bad.status_code == 400
    assert "line 1" in text(bad) and "many" in text(bad)
    assert not EvaluationSet.objects.exists()


def test_an_import_over_the_upload_limit_is_refused_before_it_is_read(as_role, handbook, settings):
    settings.MAX_UPLOAD_MB = 1
    queries = SimpleUploadedFile("queries.jsonl", b'{"_id": "q1", "text": "Where?"}\n' * 40_000)
    data = {"import_name": "big", "queries": queries, "qrels": qrels_upload(b"q1\tparking\t1\n")}
    response = post(as_role("admin"), f"/admin/stores/{handbook.pk}/evaluation/import", data)
    assert response.status_code == 400
    assert '"queries.jsonl" is larger than 1 MiB' in text(response)
    assert not EvaluationSet.objects.exists()


# --- adding a question --------------------------------------------------------------------------


def test_a_question_is_searched_and_saved_with_the_documents_ticked(as_role, handbook):
    admin = as_role("admin")
    evaluation_set = services.evaluation_set_create(store=handbook, name="by hand", questions=[], actor=None)
    url = f"{address(evaluation_set)}questions/new"
    html = admin.get(url + "?q=where+do+visitors+park").content.decode()
    ids = documents(handbook)
    assert f'name="document" value="{ids["parking.txt"]}"' in html
    assert "<mark>visitors</mark>" in html

    data = {"text": "Where do visitors park?", "document": [ids["parking.txt"]], f"grade-{ids['parking.txt']}": "2"}
    response = post(admin, url, data)
    assert response["Location"] == f"{address(evaluation_set)}"
    page = text(admin.get(response["Location"]))
    assert "Added the question “Where do visitors park?” with 1 judged document." in page
    assert "Where do visitors park? parking.txt grade 2" in page


def test_a_question_judging_a_document_of_another_store_is_refused(as_role, handbook):
    from tests.factories import DocumentFactory

    admin = as_role("admin")
    evaluation_set = services.evaluation_set_create(store=handbook, name="by hand", questions=[], actor=None)
    elsewhere = DocumentFactory()
    data = {"text": "Where do visitors park?", "document": [elsewhere.pk], f"grade-{elsewhere.pk}": "1"}
    response = post(admin, f"{address(evaluation_set)}questions/new", data)
    assert response.status_code == 400
    assert 'value="Where do visitors park?"' in response.content.decode()
    assert not EvaluationQuestion.objects.exists()


# --- runs ---------------------------------------------------------------------------------------


def test_the_compare_form_starts_a_run_per_ticked_configuration_and_the_table_polls(as_role, question_set):
    admin = as_role("admin")
    response = start(admin, question_set)
    assert response["Location"] == f"{address(question_set)}#runs"
    runs = {run.label: run for run in EvaluationRun.objects.all()}
    assert set(runs) == {"pgvector", "bm25"}
    table = admin.get(f"{address(question_set)}runs", HTTP_HX_REQUEST="true")
    assert 'hx-trigger="every 1s"' in table.content.decode()
    assert "0 of 3 questions" in text(table)
    assert "HX-Refresh" not in table
    # Halfway through, as the worker writes its progress after each question.
    EvaluationRun.objects.filter(label="bm25").update(status="running", questions_done=2)
    html = admin.get(f"{address(question_set)}runs", HTTP_HX_REQUEST="true").content.decode()
    assert '<progress max="3" value="2" aria-label="Progress of bm25">' in html
    assert "2 of 3 questions" in html and 'hx-trigger="every 1s"' in html


def test_refused_configurations_are_said_beside_their_inputs_and_start_nothing(as_role, question_set):
    admin = as_role("admin")
    weights = start(admin, question_set, **{"a-vector_weight": "0", "a-lexical_weight": "0"})
    assert weights.status_code == 400
    assert "Vector weight and Lexical weight cannot both be 0" in text(weights)
    none = start(admin, question_set, **{"a-run": None, "b-run": None})
    assert none.status_code == 400
    assert "Tick at least one configuration to evaluate." in text(none)
    assert not EvaluationRun.objects.exists()


def test_finished_runs_show_their_figures_the_best_mark_and_the_comparison(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    # Vector only against lexical: scores apart, so one run is best.
    start(admin, question_set, **{"b-label": "vector only", "b-mode": "vector"})
    evaluate_now()
    table = admin.get(f"{address(question_set)}runs", HTTP_HX_REQUEST="true")
    html = table.content.decode()
    assert table["HX-Refresh"] == "true" and "hx-get" not in html
    assert html.count('class="best-run"') == 1 and ">Best<" in html
    assert html.count('class="num ndcg"') == 2
    a, b = EvaluationRun.objects.order_by("pk")
    page = admin.get(f"{address(question_set)}?a={a.pk}&b={b.pk}")
    sentence = page.content.decode().split("data-comparison>")[1].split("</p>")[0]
    assert "vector only" in sentence and "pgvector" in sentence and "the interval [" in sentence
    assert 'id="evaluation-history"' in page.content.decode()


def test_a_comparison_names_runs_of_its_own_set_only(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    other = services.evaluation_set_create(store=question_set.store, name="other", questions=[], actor=None)
    start(admin, question_set)
    evaluate_now()
    a, b = EvaluationRun.objects.order_by("pk")
    assert admin.get(f"{address(other)}?a={a.pk}&b={b.pk}").status_code == 404


def test_a_run_is_saved_as_the_store_settings(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    start(admin, question_set)
    evaluate_now()
    bm25 = EvaluationRun.objects.get(label="bm25")
    response = post(admin, f"{address(question_set)}runs/{bm25.pk}/apply", {})
    assert response["Location"] == f"{address(question_set)}#runs"
    assert "Saved the configuration of “bm25” as the search settings of “kb”." in text(admin.get(response["Location"]))
    store = question_set.store
    store.refresh_from_db()
    assert (store.search_mode, store.search_backend) == ("lexical", "bm25")


def test_each_question_shows_what_each_run_returned_with_the_expected_marked(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    start(admin, question_set)
    evaluate_now()
    page = admin.get(f"{address(question_set)}answers")
    html = page.content.decode()
    assert html.count('class="card question"') == 3
    assert html.count('class="answer"') == 6
    words = text(page)
    assert "parking.txt ✓ expected, grade 1" in words and "badges.txt ✓ expected, grade 1" in words
    bm25 = EvaluationRun.objects.get(label="bm25")
    only = admin.get(f"{address(question_set)}answers?run={bm25.pk}").content.decode()
    assert only.count('class="answer"') == 3


@pytest.mark.parametrize("value", ["abc", "99999999999999999999", "1\x00", "-1", ""])
def test_hostile_run_and_document_ids_are_refused_or_ignored_never_a_server_error(as_role, question_set, value):
    admin = as_role("admin")
    page = admin.get(f"{address(question_set)}", {"a": value, "b": value})
    assert page.status_code == 200
    assert admin.get(f"{address(question_set)}answers", {"run": value}).status_code == 200
    data = {"text": "Where?", "document": [value], f"grade-{value}": value}
    response = post(admin, f"{address(question_set)}questions/new", data)
    assert response.status_code == 400
    assert '<p class="error" role="alert">' in response.content.decode()  # beside the documents
    assert EvaluationQuestion.objects.count() == 3


def queries_of(client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_pages_run_the_same_queries_however_many_questions_and_runs(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    urls = [f"/admin/stores/{question_set.store_id}/evaluation/", address(question_set), f"{address(question_set)}runs"]
    start(admin, question_set)
    evaluate_now()
    few = [queries_of(admin, url) for url in urls]
    ids = documents(question_set.store)
    for n in range(5):
        judgements = [{"document_id": ids["lunch.txt"], "grade": 1}, {"document_id": ids["leave.txt"], "grade": 2}]
        services.evaluation_question_add(evaluation_set=question_set, text=f"lunch question {n}", judgements=judgements)
    services.evaluation_set_create(store=question_set.store, name="another", questions=[])
    start(admin, question_set)
    start(admin, question_set, **{"c-run": "on"})
    evaluate_now()
    assert [queries_of(admin, url) for url in urls] == few


def test_a_large_set_shows_its_questions_a_page_at_a_time(as_role, question_set):
    judged = [{"document_id": next(iter(documents(question_set.store).values())), "grade": 1}]
    for number in range(4, 53):
        services.evaluation_question_add(
            evaluation_set=question_set, text=f"question {number:02}", judgements=judged, actor=None
        )
    admin = as_role("admin")
    first = text(admin.get(address(question_set)))
    assert "Questions (52)" in first and "Page 1 of 2" in first
    assert "question 50" in first and "question 51" not in first
    second = text(admin.get(f"{address(question_set)}?page=2"))
    assert "question 51" in second and "question 52" in second and "question 50" not in second
    # A page number that is not one shows the first page.
    assert "question 50" in text(admin.get(f"{address(question_set)}?page=x%00"))
