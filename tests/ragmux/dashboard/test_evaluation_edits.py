"""The Evaluation tab's edits through Django's test client: a set renamed and deleted, a
question's text and judgements changed and the question deleted, a run deleted; each audited,
admins only. And the tab's words: no "Best" for a tie, a run compared with itself, an unticked
configuration's changes said."""

from __future__ import annotations

import pytest

from ragmux.core.models import AuditEntry
from retrieval.evaluation import services
from retrieval.models import EvaluationQuestion, EvaluationRun, EvaluationSet
from tests.helpers import post, text
from tests.ragmux.dashboard.conftest import address, documents, start

pytestmark = pytest.mark.django_db


def edit_pages(evaluation_set) -> list[str]:
    question = evaluation_set.questions.order_by("position").first()
    return [f"{address(evaluation_set)}edit", f"{address(evaluation_set)}questions/{question.pk}/edit"]


def test_only_admins_reach_the_edit_pages_and_forged_edits_change_nothing(as_role, client, question_set, evaluate_now):
    start(as_role("admin"), question_set)
    evaluate_now()
    run = EvaluationRun.objects.filter(evaluation_set=question_set).first()
    question = question_set.questions.order_by("position").first()
    for url in edit_pages(question_set):
        assert as_role("admin").get(url).status_code == 200, url
        for role in ("editor", "viewer", "outsider"):
            assert as_role(role).get(url).status_code == 403, (role, url)
        assert client.get(url)["Location"].startswith("/admin/login/")
    posts = [
        (f"{address(question_set)}edit", {"name": "forged"}),
        (f"{address(question_set)}delete", {}),
        (f"{address(question_set)}questions/{question.pk}/edit", {"text": "forged?"}),
        (f"{address(question_set)}questions/{question.pk}/delete", {}),
        (f"{address(question_set)}runs/{run.pk}/delete", {}),
    ]
    for role in ("editor", "viewer", "outsider"):
        for url, data in posts:
            assert post(as_role(role), url, data).status_code == 403, (role, url)
    assert list(EvaluationSet.objects.values_list("name", flat=True)) == ["handbook"]
    assert EvaluationQuestion.objects.count() == 3 and EvaluationRun.objects.count() == 2
    question.refresh_from_db()
    assert question.text != "forged?"
    # A visit to a post-only address goes to the page its form is on.
    assert as_role("admin").get(f"{address(question_set)}delete")["Location"] == f"{address(question_set)}edit"


def test_a_set_is_renamed_a_taken_name_refused_beside_the_name_and_the_set_deleted(as_role, question_set):
    admin = as_role("admin")
    services.evaluation_set_create(store=question_set.store, name="taken", questions=[], actor=None)
    refused = post(admin, f"{address(question_set)}edit", {"name": "taken"})
    assert refused.status_code == 400 and 'id="errors_name"' in refused.content.decode()
    renamed = post(admin, f"{address(question_set)}edit", {"name": "visitors"})
    assert renamed["Location"] == address(question_set)
    question_set.refresh_from_db()
    assert question_set.name == "visitors"
    assert AuditEntry.objects.filter(action="evaluation_set.update", actor_username="admin").exists()

    deleted = post(admin, f"{address(question_set)}delete")
    assert deleted["Location"] == f"/admin/stores/{question_set.store_id}/evaluation/"
    assert "Deleted the evaluation set “visitors”" in text(admin.get(deleted["Location"]))
    assert not EvaluationSet.objects.filter(pk=question_set.pk).exists()
    assert AuditEntry.objects.filter(action="evaluation_set.delete", actor_username="admin").exists()


def test_a_question_is_reworded_regraded_a_document_unticked_then_the_question_deleted(as_role, question_set):
    admin = as_role("admin")
    ids = documents(question_set.store)
    question = question_set.questions.get(text="Where do visitors park?")
    question.judgements.create(document_id=ids["lunch.txt"], grade=1)
    url = f"{address(question_set)}questions/{question.pk}/edit"
    form = admin.get(url).content.decode()
    assert "parking.txt answers it" in form and "lunch.txt answers it" in form
    saved = post(
        admin, url, {"text": "Where do guests park?", "keep": [ids["parking.txt"]], f"grade-{ids['parking.txt']}": "3"}
    )
    assert saved["Location"] == f"{address(question_set)}#questions"
    question.refresh_from_db()
    assert question.text == "Where do guests park?"
    assert list(question.judgements.values_list("document__filename", "grade")) == [("parking.txt", 3)]
    assert AuditEntry.objects.filter(action="evaluation_set.question_update", actor_username="admin").exists()

    refused = post(admin, url, {"text": "", "keep": [ids["parking.txt"]], f"grade-{ids['parking.txt']}": "9"})
    assert refused.status_code == 400
    assert 'id="errors_text"' in refused.content.decode()

    deleted = post(admin, f"{address(question_set)}questions/{question.pk}/delete")
    assert deleted["Location"] == f"{address(question_set)}#questions"
    assert not EvaluationQuestion.objects.filter(pk=question.pk).exists()
    assert AuditEntry.objects.filter(action="evaluation_set.question_delete", actor_username="admin").exists()


def test_a_run_is_deleted_and_audited(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    start(admin, question_set)
    evaluate_now()
    run = EvaluationRun.objects.filter(evaluation_set=question_set).first()
    deleted = post(admin, f"{address(question_set)}runs/{run.pk}/delete")
    assert deleted["Location"] == f"{address(question_set)}#runs"
    assert not EvaluationRun.objects.filter(pk=run.pk).exists()
    assert AuditEntry.objects.filter(action="evaluation_run.delete", actor_username="admin").exists()
    assert post(admin, f"{address(question_set)}runs/{run.pk}/delete").status_code == 404


def test_a_tie_has_no_best_and_a_run_compared_with_itself_says_so(as_role, question_set, evaluate_now):
    admin = as_role("admin")
    # The same configuration twice: the same scores.
    start(admin, question_set, **{"b-backend": "pgvector", "b-label": "again"})
    evaluate_now()
    table = admin.get(f"{address(question_set)}runs").content.decode()
    assert ">Best<" not in table and 'class="best-run"' not in table
    a, b = EvaluationRun.objects.order_by("pk")
    same = text(admin.get(f"{address(question_set)}?a={a.pk}&b={a.pk}"))
    assert "was chosen twice: compare two different runs" in same and "may be chance" not in same
    alike = text(admin.get(f"{address(question_set)}?a={a.pk}&b={b.pk}"))
    assert "again and pgvector score the same on every question" in alike and "may be chance" not in alike


def test_an_unticked_configuration_that_was_changed_is_said_not_run(as_role, question_set):
    admin = as_role("admin")
    started = post(admin, f"{address(question_set)}evaluate", {})  # nothing ticked: refused
    assert started.status_code == 400
    response = start(admin, question_set, **{"c-label": "my hybrid", "c-mode": "hybrid"})
    page = text(admin.get(response["Location"]))
    assert "Configuration C was changed but not ticked: it was not run, nor kept." in page
