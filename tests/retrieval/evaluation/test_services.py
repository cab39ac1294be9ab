"""The evaluation services: sets and judgements, a run's claim and execution in this process, the
scheduler's sweep, applying a run to its store."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ragmux.core.audit import audit_list
from ragmux.core.errors import Conflict, InvalidInput
from retrieval.evaluation import run_services, selectors, services
from retrieval.models import EvaluationRun, QuestionEmbedding, RunQuestion
from stores.models import RagStore
from tests.factories import DocumentFactory

pytestmark = pytest.mark.django_db


def run_now(evaluation_set, *configs):
    """Starts runs of ``configs`` ({label, overrides}) and executes each here, as `ragmux eval` does."""
    runs = run_services.evaluation_runs_start(evaluation_set=evaluation_set, configs=list(configs), enqueue=False)
    for run in runs:
        run_services.evaluation_run_execute(run=run_services.evaluation_run_claim(run_id=run.pk, owner="test"))
    return [EvaluationRun.objects.get(pk=run.pk) for run in runs]


def test_a_set_holds_its_questions_in_order_with_their_graded_documents(evaluation_set, documents):
    questions = list(selectors.evaluation_questions(evaluation_set))
    assert [q.text for q in questions] == ["how long to boil spaghetti", "bicycle chain oil", "quantum chromodynamics"]
    assert [(j.document_id, j.document.filename, j.grade) for j in questions[0].judgements.all()] == [
        (documents["pasta"], "pasta.md", 2)
    ]
    entry = audit_list(object_type="evaluation_set").get()
    assert (entry.action, entry.actor_username, entry.after["questions"]) == ("evaluation_set.create", "admin", 3)


def test_a_set_name_is_unique_per_store_and_judgements_name_the_stores_own_documents(evaluation_set, documents):
    with pytest.raises(Conflict, match="already has an evaluation set named 'basics'"):
        services.evaluation_set_create(store=evaluation_set.store, name="basics")
    elsewhere = DocumentFactory()
    with pytest.raises(InvalidInput, match=f"document {elsewhere.pk} is not a document of the store 'kb'"):
        services.evaluation_question_add(
            evaluation_set=evaluation_set, text="q", judgements=[{"document_id": elsewhere.pk, "grade": 1}]
        )


def test_a_run_scores_every_judged_question_and_summarises(evaluation_set, documents):
    (run,) = run_now(evaluation_set, {"label": "lexical", "overrides": {"mode": "lexical"}})

    assert (run.status, run.error, run.questions_total, run.questions_done) == ("done", "", 3, 3)
    summary = run.summary
    assert summary["questions"] == 3
    # The two answered questions find their document first; the third finds nothing.
    for name in ("ndcg", "recall", "mrr", "hit_rate"):
        assert summary[name] == pytest.approx(2 / 3), name
    rows = list(selectors.evaluation_run_questions(run))
    assert [(row.ndcg, row.reciprocal_rank, row.hit) for row in rows] == [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0), (0, 0, 0)]
    assert rows[0].returned[0] == {"document_id": documents["pasta"], "filename": "pasta.md", "rank": 1, "grade": 2}
    assert rows[0].found == [[documents["pasta"], 1]]
    assert rows[2].returned == [] and rows[2].found == []


def test_questions_without_a_judged_document_are_not_evaluated(evaluation_set):
    services.evaluation_question_add(evaluation_set=evaluation_set, text="not judged yet")
    (run,) = run_now(evaluation_set, {"label": "A"})
    assert (run.questions_total, run.summary["questions"]) == (3, 3)

    empty = services.evaluation_set_create(store=evaluation_set.store, name="empty", questions=[{"text": "q"}])
    with pytest.raises(Conflict, match="no question with a judged document"):
        run_services.evaluation_runs_start(evaluation_set=empty, configs=[{"label": "A"}], enqueue=False)


def test_questions_are_embedded_once_per_model_across_runs(evaluation_set, fake_upstream):
    hybrid = {"mode": "hybrid"}
    run_now(evaluation_set, {"label": "A", "overrides": hybrid}, {"label": "B", "overrides": hybrid})
    run_now(evaluation_set, {"label": "C", "overrides": {"mode": "vector"}})

    assert sorted(fake_upstream.inputs()) == sorted(q.text for q in evaluation_set.questions.all())
    assert QuestionEmbedding.objects.count() == 3


def test_a_run_is_claimed_once(evaluation_set):
    (run,) = run_services.evaluation_runs_start(evaluation_set=evaluation_set, configs=[{"label": "A"}], enqueue=False)
    claimed = run_services.evaluation_run_claim(run_id=run.pk, owner="first")
    assert claimed is not None and (claimed.status, claimed.attempts) == ("running", 1)
    assert run_services.evaluation_run_claim(run_id=run.pk, owner="second") is None


def test_a_run_whose_set_is_deleted_meanwhile_ends_without_writing(evaluation_set):
    (run,) = run_services.evaluation_runs_start(evaluation_set=evaluation_set, configs=[{"label": "A"}], enqueue=False)
    claimed = run_services.evaluation_run_claim(run_id=run.pk, owner="test")
    RagStore.objects.filter(pk=evaluation_set.store_id).delete()

    run_services.evaluation_run_execute(run=claimed)

    assert not EvaluationRun.objects.exists() and not RunQuestion.objects.exists()


def test_a_run_past_its_time_limit_fails_with_the_reason(evaluation_set, settings):
    settings.EVALUATION_RUN_TIME_LIMIT = 0
    (run,) = run_now(evaluation_set, {"label": "A"})
    assert run.status == "failed"
    assert run.error == "the run took longer than EVALUATION_RUN_TIME_LIMIT (0s) and was stopped after 0 of 3 questions"


def test_a_search_that_fails_fails_the_run_naming_the_question(evaluation_set, fake_upstream):
    fake_upstream.configure("openai.embeddings", status=500)
    (run,) = run_now(evaluation_set, {"label": "A", "overrides": {"mode": "vector"}})
    assert run.status == "failed"
    assert run.error.startswith("question 1 of 3 ('how long to boil spaghetti'): embedding the query failed")


def test_the_sweep_puts_back_a_run_whose_lease_ran_out_then_gives_up(evaluation_set, settings):
    settings.EVALUATION_MAX_ATTEMPTS = 2
    (run,) = run_services.evaluation_runs_start(evaluation_set=evaluation_set, configs=[{"label": "A"}], enqueue=False)
    expired = timezone.now() - timedelta(seconds=1)
    for attempt in (1, 2):
        assert run_services.evaluation_run_claim(run_id=run.pk, owner=f"worker {attempt}") is not None
        assert run_services.evaluation_runs_requeue_expired() == []  # its lease still runs
        EvaluationRun.objects.filter(pk=run.pk).update(lease_expires_at=expired)
        swept = run_services.evaluation_runs_requeue_expired()
        run.refresh_from_db()
        if attempt == 1:
            assert (swept, run.status, run.claimed_by) == ([run.pk], "queued", "")
    assert (swept, run.status) == ([], "failed")
    assert run.error == "gave up after 2 attempts: the worker running it stopped before finishing (its lease expired)"


def test_a_finished_run_is_saved_as_the_stores_settings(evaluation_set, personas):
    weights = {"vector": 1.0, "lexical": 2.0}
    overrides = {"mode": "hybrid", "backend": "pgvector", "fusion_weights": weights, "fusion": "rrf"}
    (run,) = run_now(evaluation_set, {"label": "A", "overrides": overrides})

    run_services.evaluation_run_apply(run=run, actor=personas["admin"])

    store = RagStore.objects.get(pk=evaluation_set.store_id)
    saved = (store.search_mode, store.search_backend, store.fusion_weights, store.fusion)
    assert saved == ("hybrid", "pgvector", weights, "rrf")
    assert {e.action for e in audit_list(actor="admin")} >= {"store.update", "evaluation_run.apply"}
    (queued,) = run_services.evaluation_runs_start(
        evaluation_set=evaluation_set, configs=[{"label": "B"}], enqueue=False
    )
    with pytest.raises(Conflict, match="'B' is queued: only a finished run's configuration can be saved"):
        run_services.evaluation_run_apply(run=queued)


def test_two_runs_are_compared_in_words_and_the_best_is_marked(evaluation_set):
    lexical, vector = run_now(
        evaluation_set,
        {"label": "lexical", "overrides": {"mode": "lexical"}},
        {"label": "vector", "overrides": {"mode": "vector"}},
    )
    difference, words = selectors.evaluation_comparison(a=vector, b=lexical)
    assert difference.mean == pytest.approx(lexical.summary["ndcg"] - vector.summary["ndcg"])
    assert words.startswith("lexical is ")
    best = lexical if lexical.summary["ndcg"] >= vector.summary["ndcg"] else vector
    assert selectors.evaluation_best_run(evaluation_set) == best
    history = selectors.evaluation_history(evaluation_set)
    assert [(p.label, p.ndcg) for p in history] == [
        ("lexical", lexical.summary["ndcg"]),
        ("vector", vector.summary["ndcg"]),
    ]


def test_judgements_survive_reprocessing_and_go_with_their_document(evaluation_set, documents, ingest_now):
    from ingestion.services import document_reprocess
    from retrieval.models import Judgement
    from stores.models import Document
    from stores.services import document_delete

    pasta = Document.objects.get(pk=documents["pasta"])
    document_reprocess(document=pasta)
    ingest_now()
    assert Document.objects.get(pk=pasta.pk).status == "ready"
    assert Judgement.objects.filter(document_id=pasta.pk).count() == 1

    document_delete(document=Document.objects.get(pk=pasta.pk))
    assert not Judgement.objects.filter(document_id=pasta.pk).exists()
    assert Judgement.objects.count() == 2
