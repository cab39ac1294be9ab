from django.urls import path

from retrieval import views
from retrieval.evaluation import views as evaluation

SET = "rag-stores/<id:store_id>/eval-sets/<id:set_id>"

urlpatterns = [
    path("rag-stores/<id:store_id>/search", views.StoreSearchApi.as_view()),
    path("rag-stores/<id:store_id>/eval-sets", evaluation.EvaluationSetsApi.as_view()),
    path("rag-stores/<id:store_id>/eval-sets/import", evaluation.EvaluationSetImportApi.as_view()),
    path(SET, evaluation.EvaluationSetApi.as_view()),
    path(f"{SET}/questions", evaluation.QuestionsApi.as_view()),
    path(f"{SET}/questions/<id:question_id>", evaluation.QuestionApi.as_view()),
    path(f"{SET}/runs", evaluation.RunsApi.as_view()),
    path(f"{SET}/runs/<id:run_id>", evaluation.RunApi.as_view()),
    path(f"{SET}/runs/<id:run_id>/apply", evaluation.RunApplyApi.as_view()),
    path(f"{SET}/compare", evaluation.CompareApi.as_view()),
]
