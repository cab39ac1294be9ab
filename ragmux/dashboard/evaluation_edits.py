"""The Evaluation tab's edits: a set renamed or deleted, a question's text and judgements
changed or the question deleted, a run deleted. Admins only, like the rest of the tab; every
write goes through the evaluation services (which audit it), validated by the API's inputs."""

from __future__ import annotations

from functools import partial

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from ragmux.dashboard.access import page
from ragmux.dashboard.evaluation import GRADES, evaluation_set_of, run_of, set_url, tab_url
from ragmux.dashboard.forms import Form
from retrieval.evaluation import run_services, services
from retrieval.evaluation import selectors as evaluation
from retrieval.evaluation.serializers import QuestionUpdateInput, SetUpdateInput
from retrieval.models import EvaluationQuestion, EvaluationSet


def _set_edit_url(store_id: int, set_id: int) -> str:
    return reverse("dashboard:store-evaluation-set-edit", args=[store_id, set_id])


def _question(store_id: int, set_id: int, question_id: int) -> EvaluationQuestion:
    return evaluation.evaluation_question_get(
        evaluation_set=evaluation_set_of(store_id, set_id), question_id=question_id
    )


def _set_edit_page(request, evaluation_set: EvaluationSet, form: Form, *, status: int = 200):
    return render(
        request,
        "dashboard/evaluation_set_edit.html",
        {"store": evaluation_set.store, "evaluation_set": evaluation_set, "form": form},
        status=status,
    )


@page("admin", methods=("GET", "HEAD", "POST"))
def evaluation_set_edit(request, store_id: int, set_id: int):
    evaluation_set = evaluation_set_of(store_id, set_id)
    form = Form(request, names=("name",), initial={"name": evaluation_set.name})
    if request.method == "POST":
        save = partial(services.evaluation_set_update, evaluation_set=evaluation_set, actor=request.user)
        if form.submit(SetUpdateInput, {"name": form.values["name"]}, save, field="name"):
            messages.success(request, f"Renamed the evaluation set “{form.result.name}”.")
            return redirect(set_url(store_id, set_id))
        messages.error(request, "The set was not renamed: see the messages beside the fields.")
        return _set_edit_page(request, evaluation_set, form, status=400)
    return _set_edit_page(request, evaluation_set, form)


@page("admin", methods=("POST",), shown_on=_set_edit_url)
def evaluation_set_delete(request, store_id: int, set_id: int):
    evaluation_set = evaluation_set_of(store_id, set_id)
    services.evaluation_set_delete(evaluation_set=evaluation_set, actor=request.user)
    messages.success(request, f"Deleted the evaluation set “{evaluation_set.name}” with its questions and runs.")
    return redirect(tab_url(store_id))


def _question_page(request, question: EvaluationQuestion, form: Form, *, status: int = 200):
    judgements = sorted(question.judgements.all(), key=lambda judgement: judgement.document.filename)
    return render(
        request,
        "dashboard/evaluation_question_edit.html",
        {
            "store": question.evaluation_set.store,
            "evaluation_set": question.evaluation_set,
            "question": question,
            "judgements": [
                (judgement, str(form.values.get(f"grade-{judgement.document_id}", judgement.grade)))
                for judgement in judgements
            ],
            "kept": {str(document) for document in form.values.get("keep", [])},
            "grades": GRADES,
            "form": form,
        },
        status=status,
    )


@page("admin", methods=("GET", "HEAD", "POST"))
def evaluation_question_edit(request, store_id: int, set_id: int, question_id: int):
    """The question's text, and its judged documents: each kept (ticked) with its grade."""
    question = _question(store_id, set_id, question_id)
    judged = [str(judgement.document_id) for judgement in question.judgements.all()]
    form = Form(request, names=("text",), lists=("keep",), initial={"text": question.text, "keep": judged})
    form.nested = {"judgements": {"document_id": "keep"}}
    if request.method == "POST":
        judgements = [
            {"document_id": document, "grade": request.POST.get(f"grade-{document}", "1")}
            for document in form.values["keep"]
        ]
        form.values.update({f"grade-{item['document_id']}": item["grade"] for item in judgements})
        save = partial(services.evaluation_question_update, question=question, actor=request.user)
        if form.submit(QuestionUpdateInput, {"text": form.values["text"], "judgements": judgements}, save):
            messages.success(request, f"Saved the question “{question.text}”.")
            return redirect(set_url(store_id, set_id) + "#questions")
        messages.error(request, "The question was not saved: see the messages beside the fields.")
        return _question_page(request, question, form, status=400)
    return _question_page(request, question, form)


@page("admin", methods=("POST",), shown_on=lambda store_id, set_id, question_id: set_url(store_id, set_id))
def evaluation_question_delete(request, store_id: int, set_id: int, question_id: int):
    question = _question(store_id, set_id, question_id)
    services.evaluation_question_delete(question=question, actor=request.user)
    messages.success(request, f"Deleted the question “{question.text}”.")
    return redirect(set_url(store_id, set_id) + "#questions")


@page("admin", methods=("POST",), shown_on=lambda store_id, set_id, run_id: set_url(store_id, set_id))
def evaluation_run_delete(request, store_id: int, set_id: int, run_id: int):
    run = run_of(store_id, set_id, run_id)
    run_services.evaluation_run_delete(run=run, actor=request.user)
    messages.success(request, f"Deleted the run “{run.label}” (#{run.pk}).")
    return redirect(set_url(store_id, set_id) + "#runs")
