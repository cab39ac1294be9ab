"""The evaluation API under /admin/api/rag-stores/{id}/eval-sets: admins only; sets, questions and
judgements, the BEIR import, runs (executed here, as the worker would), the comparison, applying
a run to the store."""

import json

import pytest

from ragmux.core.audit import audit_list
from ragmux.core.models import AuditEntry
from retrieval.evaluation import run_services
from retrieval.models import EvaluationRun, EvaluationSet
from stores.models import RagStore

pytestmark = pytest.mark.django_db


def sets_url(store) -> str:
    return f"/admin/api/rag-stores/{store.pk}/eval-sets"


def set_url(evaluation_set) -> str:
    return f"{sets_url(evaluation_set.store)}/{evaluation_set.pk}"


def execute_queued_runs() -> None:
    """What the evaluation worker does with each run the API queued."""
    for run_id in EvaluationRun.objects.filter(status="queued").order_by("id").values_list("pk", flat=True):
        run_services.evaluation_run_execute(run=run_services.evaluation_run_claim(run_id=run_id, owner="test"))


def endpoints(evaluation_set) -> list[tuple[str, str]]:
    run = EvaluationRun.objects.create(evaluation_set=evaluation_set, label="A")
    question = evaluation_set.questions.first()
    base = set_url(evaluation_set)
    return [
        ("GET", sets_url(evaluation_set.store)),
        ("POST", sets_url(evaluation_set.store)),
        ("POST", f"{sets_url(evaluation_set.store)}/import"),
        ("GET", base),
        ("PATCH", base),
        ("DELETE", base),
        ("POST", f"{base}/questions"),
        ("PATCH", f"{base}/questions/{question.pk}"),
        ("DELETE", f"{base}/questions/{question.pk}"),
        ("GET", f"{base}/runs"),
        ("POST", f"{base}/runs"),
        ("GET", f"{base}/runs/{run.pk}"),
        ("POST", f"{base}/runs/{run.pk}/apply"),
        ("DELETE", f"{base}/runs/{run.pk}"),
        ("GET", f"{base}/compare?a={run.pk}&b={run.pk}"),
    ]


@pytest.mark.parametrize(("persona", "status"), [("editor", 403), ("viewer", 403), ("outsider", 403), (None, 401)])
def test_only_admins_reach_the_evaluation_endpoints(api, evaluation_set, persona, status):
    client = api(persona)
    for method, url in endpoints(evaluation_set):
        response = client.request(method, url, json={})
        assert response.status_code == status, (method, url, response.text)
    assert EvaluationSet.objects.filter(pk=evaluation_set.pk).exists()


def test_an_admin_builds_a_set_by_hand(api, evaluated_store, documents):
    client = api("admin")
    created = client.post(
        sets_url(evaluated_store),
        json={
            "name": "by hand",
            "questions": [{"text": "spaghetti", "judgements": [{"document_id": documents["pasta"]}]}],
        },
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["question_count"], body["run_count"]) == ("by hand", 1, 0)
    assert body["questions"][0]["judgements"] == [
        {"document_id": documents["pasta"], "filename": "pasta.md", "grade": 1}
    ]
    url = f"{sets_url(evaluated_store)}/{body['id']}"

    added = client.post(f"{url}/questions", json={"text": "chain oil", "judgements": []})
    assert added.status_code == 201, added.text
    question_url = f"{url}/questions/{added.json()['id']}"
    judged = client.patch(question_url, json={"judgements": [{"document_id": documents["bikes"], "grade": 3}]})
    assert judged.json()["judgements"] == [{"document_id": documents["bikes"], "filename": "bikes.md", "grade": 3}]
    assert judged.json()["text"] == "chain oil"
    assert client.patch(url, json={"name": "renamed"}).json()["name"] == "renamed"
    assert client.get(sets_url(evaluated_store)).json()[0]["question_count"] == 2
    assert client.delete(question_url).json() == {"ok": True}
    assert client.delete(url).json() == {"ok": True}
    assert not EvaluationSet.objects.exists()
    actions = [entry.action for entry in audit_list(object_type="evaluation_set")][::-1]
    assert actions == [
        "evaluation_set.create",
        "evaluation_set.question_add",
        "evaluation_set.question_update",
        "evaluation_set.update",
        "evaluation_set.question_delete",
        "evaluation_set.delete",
    ]


def test_refusals_are_precise(api, evaluation_set, documents):
    client = api("admin")
    duplicate = client.post(sets_url(evaluation_set.store), json={"name": "basics"})
    assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "duplicate_name")
    ghost = client.post(f"{set_url(evaluation_set)}/questions", json={"text": "q", "judgements": [{"document_id": 99}]})
    assert ghost.status_code == 400
    assert ghost.json()["error"]["message"] == "document 99 is not a document of the store 'kb'"
    too_many = client.post(f"{set_url(evaluation_set)}/runs", json={"configs": [{"label": str(n)} for n in range(11)]})
    assert too_many.status_code == 400
    bad_override = client.post(
        f"{set_url(evaluation_set)}/runs", json={"configs": [{"label": "A", "overrides": {"mode": "x"}}]}
    )
    assert bad_override.status_code == 400 and "mode" in json.dumps(bad_override.json())
    other_store = RagStore.objects.create(name="other", embedding_connection=evaluation_set.store.embedding_connection)
    assert client.get(f"{sets_url(other_store)}/{evaluation_set.pk}").status_code == 404


def beir_files(queries: list[dict], qrels: str) -> dict:
    return {
        "queries": ("queries.jsonl", "\n".join(json.dumps(q) for q in queries).encode(), "application/json"),
        "qrels": ("test.tsv", qrels.encode(), "text/tab-separated-values"),
    }


QUERIES = [
    {"_id": "q1", "text": "boil spaghetti"},
    {"_id": "q2", "text": "bicycle chain"},
    {"_id": "q3", "text": "nothing we hold"},
]


def test_a_beir_set_is_imported_by_file_name_stem_and_source_and_reports_what_did_not_match(
    api, evaluated_store, documents
):
    from stores.models import Document

    Document.objects.filter(pk=documents["bikes"]).update(source="doc-bikes")
    qrels = "query-id\tcorpus-id\tscore\nq1\tpasta\t2\nq1\tghost\t1\nq2\tdoc-bikes\t1\nq2\ttaxes\t0\nq3\tnowhere\t1\n"
    response = api("admin").post(
        f"{sets_url(evaluated_store)}/import", data={"name": "beir"}, files=beir_files(QUERIES, qrels)
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["questions"], body["judgements"]) == (2, 2)
    assert (body["unmatched_documents"], body["unmatched_documents_total"]) == (["ghost", "nowhere"], 2)
    assert (body["unmatched_queries"], body["unmatched_queries_total"]) == (["q3"], 1)
    assert (body["missing_queries"], body["missing_queries_total"]) == ([], 0)
    questions = body["evaluation_set"]["questions"]
    assert [(q["external_id"], q["text"]) for q in questions] == [("q1", "boil spaghetti"), ("q2", "bicycle chain")]
    assert [[(j["filename"], j["grade"]) for j in q["judgements"]] for q in questions] == [
        [("pasta.md", 2)],
        [("bikes.md", 1)],
    ]
    assert audit_list(object_type="evaluation_set").get().action == "evaluation_set.import"


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        ("q1\tghost\t1\nq2\tnowhere\t2\n", "none of the 2 corpus ids judged in qrels/test.tsv names a document"),
        ("q1\tpasta\t1\nq1\tbikes\tx\n", "qrels/test.tsv line 2: score 'x' is not a whole number"),
    ],
)
def test_a_beir_import_that_cannot_work_is_refused_saying_why(api, evaluated_store, documents, qrels, message):
    response = api("admin").post(
        f"{sets_url(evaluated_store)}/import", data={"name": "beir"}, files=beir_files(QUERIES, qrels)
    )
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]
    assert not EvaluationSet.objects.exists()


def test_runs_compare_and_reuse_each_question_embedding(api, evaluation_set, fake_upstream):
    client = api("admin")
    hybrid = {"mode": "hybrid", "fusion_weights": {"vector": 1, "lexical": 1}}
    started = client.post(
        f"{set_url(evaluation_set)}/runs",
        json={"configs": [{"label": "A", "overrides": {"mode": "vector"}}, {"label": "B", "overrides": hybrid}]},
    )
    assert started.status_code == 202, started.text
    assert [(run["label"], run["status"]) for run in started.json()["runs"]] == [("A", "queued"), ("B", "queued")]
    execute_queued_runs()
    again = client.post(f"{set_url(evaluation_set)}/runs", json={"configs": [{"label": "C", "overrides": hybrid}]})
    assert again.status_code == 202
    execute_queued_runs()

    # Three runs that embed their questions: the provider saw each question once.
    assert sorted(fake_upstream.inputs()) == sorted(q.text for q in evaluation_set.questions.all())
    listed = client.get(f"{set_url(evaluation_set)}/runs").json()
    runs = {run["label"]: run for run in listed["runs"]}
    assert {run["status"] for run in runs.values()} == {"done"}
    # B and C run the same configuration: if they score highest, the tie has no best.
    shown = sorted(runs.values(), key=lambda run: round(run["summary"]["ndcg"], 3))
    unique_top = round(shown[-1]["summary"]["ndcg"], 3) != round(shown[-2]["summary"]["ndcg"], 3)
    assert listed["best_run_id"] == (shown[-1]["id"] if unique_top else None)
    detail = client.get(f"{set_url(evaluation_set)}/runs/{runs['B']['id']}").json()
    assert (detail["questions_done"], detail["questions_total"], len(detail["questions"])) == (3, 3, 3)
    assert detail["questions"][0]["text"] == "how long to boil spaghetti"
    assert detail["config"] == hybrid | {"fusion_weights": {"vector": 1.0, "lexical": 1.0}}

    compared = client.get(f"{set_url(evaluation_set)}/compare", params={"a": runs["A"]["id"], "b": runs["B"]["id"]})
    assert compared.status_code == 200, compared.text
    body = compared.json()
    assert body["difference"] == pytest.approx(runs["B"]["summary"]["ndcg"] - runs["A"]["summary"]["ndcg"])
    interval = f"[{body['low']:.3f}, {body['high']:.3f}]"
    assert body["words"].startswith("B ") and interval in body["words"]
    assert body["words"].endswith("excludes 0" if body["excludes_zero"] else "so the difference may be chance")

    applied = client.post(f"{set_url(evaluation_set)}/runs/{runs['A']['id']}/apply")
    assert applied.status_code == 200, applied.text
    assert applied.json()["search_mode"] == "vector"
    assert RagStore.objects.get(pk=evaluation_set.store_id).search_mode == "vector"


def test_a_run_compared_with_itself_is_refused_and_a_run_is_deleted(api, evaluation_set):
    client = api("admin")
    started = client.post(f"{set_url(evaluation_set)}/runs", json={"configs": [{"label": "A"}]})
    (run,) = started.json()["runs"]
    execute_queued_runs()
    compared = client.get(f"{set_url(evaluation_set)}/compare", params={"a": run["id"], "b": run["id"]})
    assert (compared.status_code, compared.json()["error"]["code"]) == (409, "same_run")
    deleted = client.delete(f"{set_url(evaluation_set)}/runs/{run['id']}")
    assert deleted.status_code == 200, deleted.text
    assert client.get(f"{set_url(evaluation_set)}/runs/{run['id']}").status_code == 404
    assert AuditEntry.objects.filter(action="evaluation_run.delete", actor_username="admin").exists()


def test_unfinished_runs_are_neither_compared_nor_applied(api, evaluation_set):
    client = api("admin")
    started = client.post(f"{set_url(evaluation_set)}/runs", json={"configs": [{"label": "A"}, {"label": "B"}]})
    a, b = (run["id"] for run in started.json()["runs"])
    compared = client.get(f"{set_url(evaluation_set)}/compare", params={"a": a, "b": b})
    assert (compared.status_code, compared.json()["error"]["code"]) == (409, "run_not_done")
    applied = client.post(f"{set_url(evaluation_set)}/runs/{a}/apply")
    assert (applied.status_code, applied.json()["error"]["code"]) == (409, "run_not_done")


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        (b"\xff\xfe not UTF-8", "queries: the file is not UTF-8 text"),
        (b'{"_id": "q1", "text": "a\x00b"}', "queries: the file holds a NUL character"),
        (b'{"_id": "q1", "text": "a\\u0000b"}', "queries.jsonl: query 'q1' holds a NUL character"),
    ],
)
def test_an_uploaded_file_that_is_no_text_is_refused(api, evaluated_store, queries, message):
    files = {**beir_files(QUERIES, "q1\tpasta\t1\n"), "queries": ("queries.jsonl", queries, "application/json")}
    response = api("admin").post(f"{sets_url(evaluated_store)}/import", data={"name": "beir"}, files=files)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]
