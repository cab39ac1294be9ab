"""Admin API for evaluation sets and runs under /rag-stores/{store_id}/eval-sets: admins only, as
they tune the store's settings."""

from __future__ import annotations

from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from ingestion.uploads import oversize_upload
from ragmux.core.roles import AdminOnly
from ragmux.core.serializers import refuse_body
from retrieval.evaluation import run_services, selectors, services
from retrieval.evaluation.serializers import (
    CompareQuery,
    QuestionInput,
    QuestionOutput,
    QuestionUpdateInput,
    RunOutput,
    RunQuestionOutput,
    RunsStartInput,
    SetCreateInput,
    SetImportInput,
    SetOutput,
    SetUpdateInput,
)
from stores import selectors as store_selectors
from stores.serializers import StoreOutput
from stores.views import StoreEndpoint


class EvaluationSetEndpoint(StoreEndpoint):
    """An endpoint under /eval-sets/{set_id}: the store's set, resolved once after the store."""

    permission_classes = [AdminOnly]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if hasattr(self, "store"):
            self.evaluation_set = selectors.evaluation_set_get(store=self.store, set_id=kwargs["set_id"])


class QuestionEndpoint(EvaluationSetEndpoint):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if hasattr(self, "evaluation_set"):
            self.question = selectors.evaluation_question_get(
                evaluation_set=self.evaluation_set, question_id=kwargs["question_id"]
            )


class RunEndpoint(EvaluationSetEndpoint):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if hasattr(self, "evaluation_set"):
            self.run = selectors.evaluation_run_get(evaluation_set=self.evaluation_set, run_id=kwargs["run_id"])


def _set_body(evaluation_set) -> dict:
    """A set (its counts read afresh) with its questions and their judgements."""
    evaluation_set = selectors.evaluation_set_get(store=evaluation_set.store, set_id=evaluation_set.pk)
    questions = selectors.evaluation_questions(evaluation_set)
    return {**SetOutput(evaluation_set).data, "questions": QuestionOutput(questions, many=True).data}


def _question_body(question) -> dict:
    fresh = selectors.evaluation_question_get(evaluation_set=question.evaluation_set, question_id=question.pk)
    return QuestionOutput(fresh).data


class EvaluationSetsApi(StoreEndpoint):
    permission_classes = [AdminOnly]

    def get(self, request, store_id: int):
        return Response(SetOutput(selectors.evaluation_sets_for(self.store), many=True).data)

    def post(self, request, store_id: int):
        data = SetCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        evaluation_set = services.evaluation_set_create(
            store=self.store,
            name=data.validated_data["name"],
            questions=data.validated_data.get("questions", []),
            actor=request.user,
        )
        return Response(_set_body(evaluation_set), status=201)


class EvaluationSetImportApi(StoreEndpoint):
    permission_classes = [AdminOnly]
    parser_classes = [MultiPartParser]

    def post(self, request, store_id: int):
        oversize_upload(request)
        data = SetImportInput(data=request.data)
        data.is_valid(raise_exception=True)
        imported = services.evaluation_set_import_beir(
            store=self.store,
            name=data.validated_data["name"],
            queries_text=services.uploaded_text(data.validated_data["queries"], field="queries"),
            qrels_text=services.uploaded_text(data.validated_data["qrels"], field="qrels"),
            actor=request.user,
        )
        return Response(
            {
                "evaluation_set": _set_body(imported.evaluation_set),
                "questions": imported.questions,
                "judgements": imported.judgements,
                "unmatched_documents": imported.unmatched_documents,
                "unmatched_documents_total": imported.unmatched_documents_total,
                "unmatched_queries": imported.unmatched_queries,
                "unmatched_queries_total": imported.unmatched_queries_total,
                "missing_queries": imported.missing_queries,
                "missing_queries_total": imported.missing_queries_total,
            },
            status=201,
        )


class EvaluationSetApi(EvaluationSetEndpoint):
    def get(self, request, store_id: int, set_id: int):
        return Response(_set_body(self.evaluation_set))

    def patch(self, request, store_id: int, set_id: int):
        data = SetUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.evaluation_set_update(
            evaluation_set=self.evaluation_set, name=data.validated_data["name"], actor=request.user
        )
        return Response(_set_body(self.evaluation_set))

    def delete(self, request, store_id: int, set_id: int):
        refuse_body(request)
        services.evaluation_set_delete(evaluation_set=self.evaluation_set, actor=request.user)
        return Response({"ok": True})


class QuestionsApi(EvaluationSetEndpoint):
    def post(self, request, store_id: int, set_id: int):
        data = QuestionInput(data=request.data)
        data.is_valid(raise_exception=True)
        question = services.evaluation_question_add(
            evaluation_set=self.evaluation_set,
            text=data.validated_data["text"],
            judgements=data.validated_data.get("judgements", []),
            actor=request.user,
        )
        return Response(_question_body(question), status=201)


class QuestionApi(QuestionEndpoint):
    def patch(self, request, store_id: int, set_id: int, question_id: int):
        data = QuestionUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.evaluation_question_update(question=self.question, **data.validated_data, actor=request.user)
        return Response(_question_body(self.question))

    def delete(self, request, store_id: int, set_id: int, question_id: int):
        refuse_body(request)
        services.evaluation_question_delete(question=self.question, actor=request.user)
        return Response({"ok": True})


class RunsApi(EvaluationSetEndpoint):
    def get(self, request, store_id: int, set_id: int):
        best = selectors.evaluation_best_run(self.evaluation_set)
        return Response(
            {
                "runs": RunOutput(selectors.evaluation_runs_for(self.evaluation_set), many=True).data,
                "best_run_id": best.pk if best is not None else None,
            }
        )

    def post(self, request, store_id: int, set_id: int):
        data = RunsStartInput(data=request.data)
        data.is_valid(raise_exception=True)
        runs = run_services.evaluation_runs_start(
            evaluation_set=self.evaluation_set, configs=data.validated_data["configs"], actor=request.user
        )
        return Response({"runs": RunOutput(runs, many=True).data}, status=202)


class RunApi(RunEndpoint):
    def get(self, request, store_id: int, set_id: int, run_id: int):
        questions = selectors.evaluation_run_questions(self.run)
        return Response({**RunOutput(self.run).data, "questions": RunQuestionOutput(questions, many=True).data})

    def delete(self, request, store_id: int, set_id: int, run_id: int):
        refuse_body(request)
        run_services.evaluation_run_delete(run=self.run, actor=request.user)
        return Response({"ok": True})


class RunApplyApi(RunEndpoint):
    def post(self, request, store_id: int, set_id: int, run_id: int):
        refuse_body(request)
        outcome = run_services.evaluation_run_apply(run=self.run, actor=request.user)
        body = StoreOutput(store_selectors.store_get(outcome.store.pk)).data
        return Response({**body, "reprocess_recommended": outcome.reprocess_recommended})


class CompareApi(EvaluationSetEndpoint):
    def get(self, request, store_id: int, set_id: int):
        query = CompareQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        a, b = (
            selectors.evaluation_run_get(evaluation_set=self.evaluation_set, run_id=query.validated_data[name])
            for name in ("a", "b")
        )
        difference, words = selectors.evaluation_comparison(a=a, b=b)
        return Response(
            {
                "a": a.pk,
                "b": b.pk,
                "metric": "ndcg@10",
                "difference": difference.mean,
                "low": difference.low,
                "high": difference.high,
                "excludes_zero": difference.excludes_zero,
                "words": words,
            }
        )
