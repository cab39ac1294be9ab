"""The Evaluation tab as an admin meets it: a set built by hand (three questions, each searched
and its answering document ticked), two configurations evaluated with their progress shown, the
best run marked, the two compared in words, and what each returned, question by question."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import sign_in
from tests.ragmux.dashboard.accessibility import assert_accessible
from tests.ragmux.dashboard.conftest import HANDBOOK, QUESTIONS

pytestmark = pytest.mark.browser


def add_question(page, question: str, answer: str) -> None:
    page.get_by_role("link", name="Add a question").click()
    page.get_by_label("Question").fill(question)
    page.get_by_role("button", name="Search").click()
    expect(page.locator(".candidate")).to_have_count(len(HANDBOOK))
    assert_accessible(page)
    candidate = page.locator(".candidate", has_text=answer)
    candidate.get_by_role("checkbox").check()
    candidate.get_by_label(re.compile("^Grade")).select_option("2")
    page.get_by_role("button", name="Save the question").click()
    expect(page.get_by_role("status")).to_have_text(f"Added the question “{question}” with 1 judged document.")


def test_a_set_built_by_hand_is_evaluated_with_progress_and_read_question_by_question(
    wide_page, personas, handbook, evaluate_now, shots
):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"/admin/stores/{handbook.pk}/")
    page.get_by_role("navigation", name="Store").get_by_role("link", name="Evaluation").click()
    assert_accessible(page)
    create = page.get_by_role("region", name="Create a set")
    create.get_by_label("Name").fill("handbook questions")
    create.get_by_role("button", name="Create the set").click()
    expect(page.get_by_role("heading", name="kb: handbook questions")).to_be_visible()

    for question, answer in QUESTIONS.items():
        add_question(page, question, answer)
    rows = page.locator("table.questions tbody tr")
    expect(rows).to_have_count(3)
    for (question, answer), row in zip(QUESTIONS.items(), rows.all(), strict=True):
        expect(row).to_contain_text(question)
        expect(row.locator(".judged")).to_have_text(f"{answer} grade 2")
    shots(page, "evaluation-set")

    # A is the store's settings and B the same over the other backend; B is made vector only.
    expect(page.get_by_role("checkbox", name="Evaluate A")).to_be_checked()
    expect(page.get_by_role("checkbox", name="Evaluate B")).to_be_checked()
    expect(page.get_by_role("checkbox", name="Evaluate C")).not_to_be_checked()
    page.locator("#b-mode").select_option("vector")
    page.locator("#b-label").fill("vector only")
    page.get_by_role("button", name="Evaluate", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("Started 2 runs: the table shows their progress.")
    runs = page.locator("#runs tbody tr")
    expect(runs).to_have_count(2)
    expect(runs.locator(".progress")).to_have_text(["0 of 3 questions", "0 of 3 questions"])

    evaluate_now(limit=1)  # one run done; the table, polling, shows it while the other waits
    expect(page.locator("#runs tbody tr[data-status=done]")).to_have_count(1)
    expect(page.locator("#runs tbody tr[data-status=queued] .progress")).to_have_text("0 of 3 questions")

    evaluate_now()
    # Once nothing moves, the page reloads with the best run, the comparison and the chart.
    expect(page.locator("#runs tbody tr[data-status=done]")).to_have_count(2)
    expect(page.locator("#runs .best")).to_have_count(1)
    expect(page.locator("#runs tr.best-run .num.ndcg")).to_have_text(re.compile(r"^\d\.\d{3}$"))
    expect(page.locator("#evaluation-chart canvas").first).to_be_visible()
    comparison = page.get_by_role("region", name="Compare two runs")
    comparison.get_by_role("button", name="Compare").click()
    expect(page.locator("[data-comparison]")).to_have_text(
        re.compile(r"(is better than|is worse than|score the same).* the interval \[")
    )
    shots(page, "evaluation-runs")

    page.get_by_role("link", name="What each run returned, question by question").click()
    questions = page.locator("section.question")
    expect(questions).to_have_count(3)
    for (question, answer), section in zip(QUESTIONS.items(), questions.all(), strict=True):
        expect(section.get_by_role("heading", level=2)).to_contain_text(question)
        expect(section.locator(".answer")).to_have_count(2)
        expected = section.locator("li.expected")
        expect(expected.first).to_contain_text(f"{answer} ✓ expected, grade 2")
    shots(page, "evaluation-question")


def test_sets_questions_and_runs_are_edited_and_deleted_and_the_tab_says_what_is_true(
    wide_page, personas, handbook, evaluate_now, shots
):
    """No "Best" for a tie; a run compared with itself, or with one that scored the same, is not
    "may be chance"; an unticked configuration's changes are said not run; a set renamed, a
    question reworded and unticked, a run and a question deleted, then the set."""
    from retrieval.evaluation import services
    from stores.models import Document

    evaluation_set = services.evaluation_set_create(store=handbook, name="handbook", questions=[], actor=None)
    ids = dict(Document.objects.filter(store=handbook).values_list("filename", "pk"))
    for question, filename in QUESTIONS.items():
        services.evaluation_question_add(
            evaluation_set=evaluation_set, text=question, judgements=[{"document_id": ids[filename]}], actor=None
        )
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/stores/{handbook.pk}/evaluation/{evaluation_set.pk}/")

    # B made the same as A, and C changed but left unticked.
    page.locator("#b-backend").select_option(page.locator("#a-backend").input_value())
    page.locator("#b-label").fill("A again")
    page.locator("#c-label").fill("my idea")
    page.get_by_role("button", name="Evaluate", exact=True).click()
    expect(page.get_by_role("alert").filter(has_text="Configuration C")).to_have_text(
        "Configuration C was changed but not ticked: it was not run, nor kept."
    )
    evaluate_now()
    page.reload()
    expect(page.locator("#runs tbody tr[data-status=done]")).to_have_count(2)
    expect(page.locator("#runs .best")).to_have_count(0)
    comparison = page.get_by_role("region", name="Compare two runs")
    comparison.get_by_role("button", name="Compare").click()
    expect(page.locator("[data-comparison]")).to_contain_text("score the same on every question")
    comparison.get_by_label("Run B").select_option(index=0)
    comparison.get_by_label("Run A").select_option(index=0)
    comparison.get_by_role("button", name="Compare").click()
    expect(comparison.get_by_role("alert")).to_contain_text("was chosen twice: compare two different runs")
    expect(comparison).not_to_contain_text("may be chance")

    # A question reworded, one of its documents unticked.
    page.on("dialog", lambda dialog: dialog.accept())
    first = page.locator("table.questions tbody tr").first
    first.get_by_role("link", name=re.compile("^Edit")).click()
    page.get_by_label("Question").fill("How often are contractor badges renewed?")
    page.get_by_label("Grade of badges.txt").select_option("3")
    shots(page, "evaluation-question-edit")
    page.get_by_role("button", name="Save the question").click()
    expect(page.get_by_role("status")).to_have_text("Saved the question “How often are contractor badges renewed?”.")
    expect(first.locator(".judged")).to_have_text("badges.txt grade 3")

    # A question, then a run, deleted.
    page.locator("table.questions tbody tr").last.get_by_role("button", name=re.compile("^Delete")).click()
    expect(page.locator("table.questions tbody tr")).to_have_count(2)
    page.locator("#runs tbody tr").first.get_by_role("button", name=re.compile("^Delete")).click()
    expect(page.get_by_role("status")).to_contain_text("Deleted the run")
    expect(page.locator("#runs tbody tr")).to_have_count(1)

    # The set renamed, then deleted.
    page.get_by_role("link", name="Rename or delete handbook").click()
    page.get_by_role("textbox", name="Name").fill("badges and parking")
    page.get_by_role("button", name="Save the name").click()
    expect(page.get_by_role("heading", name="kb: badges and parking")).to_be_visible()
    page.get_by_role("link", name="Rename or delete badges and parking").click()
    shots(page, "evaluation-set-edit")
    page.get_by_role("button", name="Delete the set").click()
    expect(page.get_by_role("status")).to_have_text(
        "Deleted the evaluation set “badges and parking” with its questions and runs."
    )
    expect(page).to_have_url(re.compile(rf"/admin/stores/{handbook.pk}/evaluation/$"))
