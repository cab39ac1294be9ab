"""Reads of evaluation sets and runs: lists, the best run, the comparison of two runs, a set's
history for a chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Prefetch, QuerySet

from ragmux.core.errors import Conflict, NotFound
from retrieval.evaluation import scores
from retrieval.models import EvaluationQuestion, EvaluationRun, EvaluationSet, Judgement, RunQuestion, RunStatus
from stores.models import RagStore


def evaluation_sets_for(store: RagStore) -> QuerySet[EvaluationSet]:
    """The store's sets, oldest first, each with its question and run counts."""
    return (
        EvaluationSet.objects.filter(store=store)
        .annotate(question_count=Count("questions", distinct=True), run_count=Count("runs", distinct=True))
        .order_by("id")
    )


def evaluation_set_get(*, store: RagStore, set_id: int) -> EvaluationSet:
    """One of the store's sets; NotFound when the store has no such set."""
    found = evaluation_sets_for(store).select_related("store").filter(pk=set_id).first()
    if found is None:
        raise NotFound.of("evaluation set")
    return found


def evaluation_set_named(*, store_name: str, set_name: str) -> EvaluationSet:
    """A set by its store's name and its own (the command line names them)."""
    store = RagStore.objects.filter(name=store_name).first()
    if store is None:
        raise NotFound(f"no store named {store_name!r}")
    found = EvaluationSet.objects.select_related("store").filter(store=store, name=set_name).first()
    if found is None:
        raise NotFound(f"the store {store_name!r} has no evaluation set named {set_name!r}")
    return found


def evaluation_questions(evaluation_set: EvaluationSet) -> QuerySet[EvaluationQuestion]:
    """The set's questions in order, each with its judgements (and their documents' file names)."""
    judgements = Judgement.objects.select_related("document").only(
        "question_id", "grade", "document_id", "document__filename"
    )
    return evaluation_set.questions.prefetch_related(Prefetch("judgements", queryset=judgements)).order_by(
        "position", "id"
    )


def evaluation_question_get(*, evaluation_set: EvaluationSet, question_id: int) -> EvaluationQuestion:
    question = evaluation_questions(evaluation_set).filter(pk=question_id).first()
    if question is None:
        raise NotFound.of("question")
    question.evaluation_set = evaluation_set
    return question


def evaluation_runs_for(evaluation_set: EvaluationSet) -> QuerySet[EvaluationRun]:
    """The set's runs, newest first."""
    return EvaluationRun.objects.filter(evaluation_set=evaluation_set).order_by("-id")


def evaluation_run_get(*, evaluation_set: EvaluationSet, run_id: int) -> EvaluationRun:
    run = evaluation_runs_for(evaluation_set).filter(pk=run_id).first()
    if run is None:
        raise NotFound.of("run")
    run.evaluation_set = evaluation_set
    return run


def evaluation_run_questions(run: EvaluationRun) -> QuerySet[RunQuestion]:
    """What the run made of each question, in the set's order, with the question."""
    return RunQuestion.objects.filter(run=run).select_related("question").order_by("question__position", "question_id")


def evaluation_best_run(evaluation_set: EvaluationSet) -> EvaluationRun | None:
    """The finished run whose nDCG@10 is above every other's, as the table shows it (to
    three decimals); None before any, or when the highest is shared (a tie has no best)."""
    finished = evaluation_runs_for(evaluation_set).filter(status=RunStatus.DONE)
    shown = sorted(
        ((round(run.summary["ndcg"], scores.SHOWN_PLACES), run) for run in finished), key=lambda pair: pair[0]
    )
    if not shown or (len(shown) > 1 and shown[-1][0] == shown[-2][0]):
        return None
    return shown[-1][1]


def evaluation_comparison(*, a: EvaluationRun, b: EvaluationRun) -> tuple[scores.Difference, str]:
    """The paired bootstrap of two finished runs' per-question nDCG@10 over the questions both
    scored (B − A), and it in words ("B is better than A by …")."""
    if a.pk == b.pk:
        raise Conflict(f"run {a.label!r} was chosen twice: compare two different runs", code="same_run")
    for run in (a, b):
        if run.status != RunStatus.DONE:
            raise Conflict(f"run {run.label!r} is {run.status}: only finished runs are compared", code="run_not_done")
    scores_a = dict(RunQuestion.objects.filter(run=a).values_list("question_id", "ndcg"))
    scores_b = dict(RunQuestion.objects.filter(run=b).values_list("question_id", "ndcg"))
    paired = sorted(set(scores_a) & set(scores_b))
    if not paired:
        raise Conflict("the two runs scored no question in common", code="nothing_to_compare")
    difference = scores.paired_bootstrap([scores_b[q] for q in paired], [scores_a[q] for q in paired])
    return difference, scores.describe(difference, ours=b.label, theirs=a.label)


@dataclass(frozen=True)
class HistoryPoint:
    run_id: int
    finished_at: datetime
    label: str
    ndcg: float


def evaluation_history(evaluation_set: EvaluationSet) -> list[HistoryPoint]:
    """The set's finished runs in the order they finished: a chart of nDCG@10 over time."""
    finished = EvaluationRun.objects.filter(evaluation_set=evaluation_set, status=RunStatus.DONE).order_by(
        "finished_at", "id"
    )
    return [HistoryPoint(run.pk, run.finished_at, run.label, run.summary["ndcg"]) for run in finished]
