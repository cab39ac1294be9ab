"""The store's Evaluation tab: its evaluation sets, a set's questions and the documents that
answer them, runs of search configurations over a set, and what they found. Admins only, as the
store's settings (a run can be saved as them). Every read goes through the evaluation selectors
and every write through its services, validated by the API's own inputs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from ingestion.uploads import oversize_upload
from ragmux.core.converters import IdConverter
from ragmux.core.paging import FIRST_PAGE
from ragmux.core.serializers import PageQuery
from ragmux.dashboard.access import page
from ragmux.dashboard.compare import (
    Configuration,
    configuration_choices,
    configuration_from,
    default_configurations,
    query_problem,
    search_input,
    snippet,
)
from ragmux.dashboard.forms import Form, attempt
from ragmux.dashboard.pager import pager
from retrieval.evaluation import run_services, services
from retrieval.evaluation import selectors as evaluation
from retrieval.evaluation.scores import NDCG_DEPTH, collapse_to_documents
from retrieval.evaluation.serializers import QuestionInput, RunsStartInput, SetCreateInput, SetImportInput
from retrieval.models import EvaluationQuestion, EvaluationRun, EvaluationSet, Judgement, RunQuestion, RunStatus
from retrieval.rerank import reranked_search
from retrieval.search import Hit, matching_words
from retrieval.serializers import MAX_QUERY_CHARS
from stores import selectors
from stores.models import RagStore
from stores.serializers import MAX_TOP_K

# The compare form offers this many configurations; two are ticked to run at first.
SIDES = ("a", "b", "c")
FIRST_RUN = ("a", "b")
# What a judged document's grade means, as the add-a-question form offers it.
GRADES = ((1, "relevant"), (2, "highly relevant"), (3, "the best answer"))
# Statuses that change on their own: while a set has runs in them its runs table polls.
MOVING = (RunStatus.QUEUED, RunStatus.RUNNING)


def tab_url(store_id: int) -> str:
    return reverse("dashboard:store-evaluation", args=[store_id])


def set_url(store_id: int, set_id: int) -> str:
    return reverse("dashboard:store-evaluation-set", args=[store_id, set_id])


def evaluation_set_of(store_id: int, set_id: int) -> EvaluationSet:
    """One of the store's sets (with its store), or the 404 page."""
    return evaluation.evaluation_set_get(store=selectors.store_get(store_id), set_id=set_id)


# --- the tab: a store's sets ------------------------------------------------------------------


def _tab(request, store: RagStore, *, create: Form | None = None, upload: Form | None = None, status: int = 200):
    return render(
        request,
        "dashboard/evaluation.html",
        {
            "store": store,
            "sets": list(evaluation.evaluation_sets_for(store)),
            "create": create or Form(),
            "upload": upload or Form(),
        },
        status=status,
    )


@page("admin")
def evaluation_tab(request, store_id: int):
    return _tab(request, selectors.store_get(store_id))


@page("admin", methods=("POST",), shown_on=tab_url)
def evaluation_set_create(request, store_id: int):
    store = selectors.store_get(store_id)
    form = Form(request, names=("name",))
    save = partial(services.evaluation_set_create, store=store, questions=[], actor=request.user)
    if form.submit(SetCreateInput, {"name": form.values["name"]}, save, field="name"):
        messages.success(request, f"Created the evaluation set “{form.result.name}”: add its questions.")
        return redirect(set_url(store.pk, form.result.pk))
    messages.error(request, "The set was not created: see the messages beside the fields.")
    return _tab(request, store, create=form, status=400)


@page("admin", methods=("POST",), shown_on=tab_url)
def evaluation_set_import(request, store_id: int):
    store = selectors.store_get(store_id)
    form = Form(request, names=("import_name",))
    form.nested = {"name": {"name": "import_name"}}
    files = {"name": form.values["import_name"], **{name: request.FILES.get(name) for name in ("queries", "qrels")}}

    def import_beir(*, name: str, queries, qrels) -> services.BeirImport:
        return services.evaluation_set_import_beir(
            store=store,
            name=name,
            queries_text=services.uploaded_text(queries, field="queries"),
            qrels_text=services.uploaded_text(qrels, field="qrels"),
            actor=request.user,
        )

    too_large = attempt(lambda: oversize_upload(request)).refusal
    if too_large is not None:
        form.refuse(too_large, field="queries")
    elif form.submit(SetImportInput, files, import_beir, field="qrels"):
        imported = form.result
        messages.success(request, f"Imported “{imported.evaluation_set.name}” with {imported.questions} questions.")
        for warning in _import_warnings(imported):
            messages.warning(request, warning)
        return redirect(set_url(store.pk, imported.evaluation_set.pk))
    messages.error(request, "The set was not imported: see the messages beside the fields.")
    return _tab(request, store, upload=form, status=400)


def _listed(shown: list[str], total: int) -> str:
    more = total - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _import_warnings(imported: services.BeirImport) -> list[str]:
    """What of the BEIR files was left out, each cause said apart: corpus ids matching no
    document (and the questions judging only those), and queries missing from queries.jsonl."""
    warnings = []
    judged_nothing_here = imported.unmatched_queries_total - imported.missing_queries_total
    if imported.unmatched_documents_total:
        warnings.append(
            "Corpus ids matching no document here: "
            f"{_listed(imported.unmatched_documents, imported.unmatched_documents_total)}."
            + (
                f" {judged_nothing_here} question{'s' if judged_nothing_here != 1 else ''} judged only such "
                "documents and were left out."
                if judged_nothing_here
                else ""
            )
        )
    if imported.missing_queries_total:
        count = imported.missing_queries_total
        warnings.append(
            f"{count} quer{'ies' if count != 1 else 'y'} of qrels/test.tsv missing from queries.jsonl "
            f"{'were' if count != 1 else 'was'} left out: {_listed(imported.missing_queries, count)}."
        )
    return warnings


# --- a set: its questions, the compare form, its runs --------------------------------------------


@dataclass
class RunsTable:
    """A set's runs as the table shows them: polled while one of them is queued or running."""

    evaluation_set: EvaluationSet
    runs: list[EvaluationRun]
    best: EvaluationRun | None

    @property
    def moving(self) -> bool:
        return any(run.status in MOVING for run in self.runs)

    @property
    def finished(self) -> list[EvaluationRun]:
        return [run for run in self.runs if run.status == RunStatus.DONE]

    @property
    def url(self) -> str:
        return reverse("dashboard:store-evaluation-runs", args=[self.evaluation_set.store_id, self.evaluation_set.pk])


def _runs_table(evaluation_set: EvaluationSet) -> RunsTable:
    return RunsTable(
        evaluation_set,
        list(evaluation.evaluation_runs_for(evaluation_set)),
        evaluation.evaluation_best_run(evaluation_set),
    )


def _default_label(values: dict[str, Any]) -> str:
    return f"{values['mode']} · {values['backend']}" + (" · rerank" if values.get("rerank") else "")


def _fresh_configurations(store: RagStore) -> tuple[list[Configuration], dict[str, Any]]:
    """A and B as search compare starts them, C a copy of A not ticked; each labelled by what it runs."""
    a, b = default_configurations(store)
    configurations = [a, b, Configuration("c", dict(a.values))]
    values = {f"{c.side}-label": _default_label(c.values) for c in configurations}
    values.update({f"{side}-run": side in FIRST_RUN for side in SIDES})
    return configurations, values


def _comparison(request, evaluation_set: EvaluationSet) -> dict[str, Any]:
    """The sentence comparing the two runs the page's query names, when it names two."""
    chosen = [request.GET.get(name, "") for name in ("a", "b")]
    if not all(re.fullmatch(IdConverter.regex, value) for value in chosen):
        return {"chosen": chosen}
    a, b = (evaluation.evaluation_run_get(evaluation_set=evaluation_set, run_id=int(value)) for value in chosen)
    compared = attempt(lambda: evaluation.evaluation_comparison(a=a, b=b))
    if compared.refusal is not None:
        return {"chosen": chosen, "comparison_error": compared.refusal.message}
    _difference, words = compared.result
    return {"chosen": chosen, "comparison": words}


def _set_page(
    request,
    evaluation_set: EvaluationSet,
    *,
    configurations: list[Configuration] | None = None,
    form: Form | None = None,
    status: int = 200,
):
    store = evaluation_set.store
    if configurations is None:
        configurations, values = _fresh_configurations(store)
        form = Form(initial=values)
    table = _runs_table(evaluation_set)
    return render(
        request,
        "dashboard/evaluation_set.html",
        {
            "store": store,
            "evaluation_set": evaluation_set,
            # A page of them: a set imported from a collection holds hundreds.
            "questions": pager(
                evaluation.evaluation_questions(evaluation_set),
                _page_asked(request),
                address=set_url(store.pk, evaluation_set.pk),
                filters={},
            ),
            "configurations": [
                (c, form.values.get(f"{c.side}-run"), form.values.get(f"{c.side}-label", "")) for c in configurations
            ],
            "form": form,
            "table": table,
            "history": _history(evaluation_set),
            **_comparison(request, evaluation_set),
            **configuration_choices(),
        },
        status=status,
    )


def _page_asked(request) -> dict:
    checked = PageQuery(data={"page": request.GET.get("page") or 1})
    return checked.validated_data if checked.is_valid() else FIRST_PAGE


def _history(evaluation_set: EvaluationSet) -> dict[str, list]:
    """The chart's series: each finished run's label and nDCG@10, in the order they finished."""
    points = evaluation.evaluation_history(evaluation_set)
    return {
        "labels": [f"#{point.run_id} {point.label}" for point in points],
        "ndcg": [point.ndcg for point in points],
    }


@page("admin")
def evaluation_set_detail(request, store_id: int, set_id: int):
    return _set_page(request, evaluation_set_of(store_id, set_id))


@page("admin")
def evaluation_runs(request, store_id: int, set_id: int):
    """The runs table alone: htmx polls it while a run is queued or running."""
    table = _runs_table(evaluation_set_of(store_id, set_id))
    response = render(request, "dashboard/_evaluation_runs.html", {"table": table})
    if not table.moving:
        # The last poll: the page reloads, so the comparison and the chart take in the new runs.
        response["HX-Refresh"] = "true"
    return response


@page("admin", methods=("POST",), shown_on=set_url)
def evaluation_runs_start(request, store_id: int, set_id: int):
    evaluation_set = evaluation_set_of(store_id, set_id)
    form = Form(request, names=[f"{side}-label" for side in SIDES], checkboxes=[f"{side}-run" for side in SIDES])
    configurations = [configuration_from(request.POST, side, None) for side in SIDES]
    chosen = [c for c in configurations if form.values[f"{c.side}-run"]]
    if len(chosen) < 1:
        form.error("configurations", "Tick at least one configuration to evaluate.")
    configs = [
        {
            "label": form.values[f"{c.side}-label"].strip() or _default_label(c.values),
            "overrides": {name: value for name, value in (c.overrides or {}).items() if value is not None},
        }
        for c in chosen
    ]
    valid = not form.errors and all(c.overrides is not None for c in chosen)
    save = partial(run_services.evaluation_runs_start, evaluation_set=evaluation_set, actor=request.user)
    if valid and form.submit(RunsStartInput, {"configs": configs}, save, field="configurations"):
        count = len(form.result)
        messages.success(request, f"Started {count} run{'s' if count != 1 else ''}: the table shows their progress.")
        for side in _unticked_edits(evaluation_set.store, configurations, form):
            messages.warning(request, f"Configuration {side} was changed but not ticked: it was not run, nor kept.")
        return redirect(set_url(store_id, set_id) + "#runs")
    messages.error(request, "Nothing was evaluated: see the messages beside the configurations.")
    return _set_page(request, evaluation_set, configurations=configurations, form=form, status=400)


def _unticked_edits(store: RagStore, configurations: list[Configuration], form: Form) -> list[str]:
    """The configurations left unticked whose settings or label differ from those the page
    offers: they were not run, and the page after the runs start offers its own again."""
    fresh, values = _fresh_configurations(store)
    offered = {c.side: search_input(c.values, None) for c in fresh}
    return [
        c.side.upper()
        for c in configurations
        if not form.values[f"{c.side}-run"]
        and (
            search_input(c.values, None) != offered[c.side]
            or form.values[f"{c.side}-label"].strip() not in ("", values[f"{c.side}-label"])
        )
    ]


def run_of(store_id: int, set_id: int, run_id: int) -> EvaluationRun:
    """One of the set's runs, or the 404 page."""
    return evaluation.evaluation_run_get(evaluation_set=evaluation_set_of(store_id, set_id), run_id=run_id)


@page("admin", methods=("POST",), shown_on=lambda store_id, set_id, run_id: set_url(store_id, set_id))
def evaluation_run_apply(request, store_id: int, set_id: int, run_id: int):
    run = run_of(store_id, set_id, run_id)
    store = run.evaluation_set.store
    applied = attempt(lambda: run_services.evaluation_run_apply(run=run, actor=request.user))
    if applied.refusal is not None:
        messages.error(request, f"“{run.label}” was not saved as the store's settings: {applied.refusal.message}")
    else:
        messages.success(request, f"Saved the configuration of “{run.label}” as the search settings of “{store.name}”.")
    return redirect(set_url(store_id, set_id) + "#runs")


# --- adding a question: type it, search, tick the documents that answer it ------------------------


@dataclass(frozen=True)
class Candidate:
    """A document the store's search returned for the question, by its best chunk."""

    rank: int
    hit: Hit
    snippet: list[tuple[str, bool]]


def _candidates(store: RagStore, query: str) -> tuple[list[Candidate], str]:
    """The documents the store's own search finds for ``query``, best first (as many chunks as a
    search returns, each document once), or why it could not search."""
    searched = attempt(lambda: reranked_search(store=store, query=query, overrides={"top_k": MAX_TOP_K}))
    if searched.refusal is not None:
        return [], searched.refusal.message
    result = searched.result
    first_hit = {}
    for hit in result.hits:
        first_hit.setdefault(hit.document_id, hit)
    words = matching_words(query=query, result=result)
    documents = collapse_to_documents(hit.document_id for hit in result.hits)
    return [
        Candidate(rank, first_hit[document], snippet(first_hit[document].content, words))
        for rank, document in enumerate(documents, start=1)
    ], ""


def _question_page(request, evaluation_set: EvaluationSet, *, query: str, form: Form | None = None, status: int = 200):
    problem = query_problem(query)
    candidates, search_error = _candidates(evaluation_set.store, query) if query and not problem else ([], "")
    return render(
        request,
        "dashboard/evaluation_question_form.html",
        {
            "store": evaluation_set.store,
            "evaluation_set": evaluation_set,
            "query": query,
            "query_error": problem,
            "search_error": search_error,
            "max_query_chars": MAX_QUERY_CHARS,
            "candidates": candidates,
            "grades": GRADES,
            "form": form or Form(),
        },
        status=status,
    )


@page("admin", methods=("GET", "HEAD", "POST"))
def evaluation_question_add(request, store_id: int, set_id: int):
    evaluation_set = evaluation_set_of(store_id, set_id)
    if request.method != "POST":
        return _question_page(request, evaluation_set, query=request.GET.get("q", "").strip())
    # A refusal of a judgement (`judgements[0].document_id`) is said above the documents.
    form = Form(request, names=("text",), lists=("document",), nested={"judgements": {"document_id": "document"}})
    grades = {document: request.POST.get(f"grade-{document}", "1") for document in form.values["document"]}
    judgements = [{"document_id": document, "grade": grade} for document, grade in grades.items()]
    save = partial(services.evaluation_question_add, evaluation_set=evaluation_set, actor=request.user)
    data = {"text": form.values["text"], "judgements": judgements}
    if form.submit(QuestionInput, data, save, field="document"):
        count = len(judgements)
        messages.success(
            request,
            f"Added the question “{form.values['text'].strip()}” with {count} "
            f"judged document{'s' if count != 1 else ''}.",
        )
        return redirect(set_url(store_id, set_id))
    messages.error(request, "The question was not added: see the messages beside the fields.")
    return _question_page(request, evaluation_set, query=form.values["text"].strip(), form=form, status=400)


# --- what each run returned for each question -------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What one run returned for one question: its top documents, the expected ones marked
    (``returned`` carries each one's grade), and the expected ones it did not return there."""

    run: EvaluationRun
    result: RunQuestion
    missed: list[Judgement]


def _answers(
    questions: list[EvaluationQuestion], runs: list[EvaluationRun]
) -> list[tuple[EvaluationQuestion, list[Answer]]]:
    """Each question with what each run returned for it, in the set's order."""
    results = {run.pk: {r.question_id: r for r in evaluation.evaluation_run_questions(run)} for run in runs}
    rows = []
    for question in questions:
        judgements = list(question.judgements.all())
        answers = []
        for run in runs:
            result = results[run.pk].get(question.pk)
            if result is not None:
                returned = {item["document_id"] for item in result.returned}
                answers.append(Answer(run, result, [j for j in judgements if j.document_id not in returned]))
        rows.append((question, answers))
    return rows


@page("admin")
def evaluation_answers(request, store_id: int, set_id: int):
    evaluation_set = evaluation_set_of(store_id, set_id)
    finished = [run for run in evaluation.evaluation_runs_for(evaluation_set) if run.status == RunStatus.DONE]
    chosen = set(request.GET.getlist("run"))
    runs = [run for run in finished if str(run.pk) in chosen] or finished
    return render(
        request,
        "dashboard/evaluation_answers.html",
        {
            "store": evaluation_set.store,
            "evaluation_set": evaluation_set,
            "finished": finished,
            "runs": runs,
            "chosen": {run.pk for run in runs},
            "questions": _answers(list(evaluation.evaluation_questions(evaluation_set)), runs),
            "depth": NDCG_DEPTH,
        },
    )
