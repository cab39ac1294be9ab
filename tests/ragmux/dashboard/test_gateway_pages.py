"""The dashboard's projects, keys, request logs and the overview's usage through Django's test
client: who sees which controls, forged posts, a key shown once and never kept, the request
log's filters, pages and export link, and the queries each page runs."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gateway.clients.gateway_keys import hash_key
from gateway.clients.models import GatewayKey, Project, RequestLog
from gateway.clients.services import key_create
from ragmux.dashboard.request_logs import PAGE_SIZE
from tests.factories import ProjectFactory, RequestLogFactory
from tests.helpers import post, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(chat_connection, kb):
    return ProjectFactory(name="support", chat_connection=chat_connection, store=kb, system_prompt="Be brief.")


@pytest.fixture
def issued(project):
    return key_create(project=project, name="app", scopes=None, expires_at=None)


def log(project, key=None, *, ago=timedelta(0), **values) -> RequestLog:
    """A call of ``project``'s, ``ago`` before now."""
    return RequestLogFactory(project=project, key=key, created_at=timezone.now() - ago, **values)


# --- roles ------------------------------------------------------------------------------------


def test_viewers_read_projects_keys_and_logs_without_any_control(as_role, project, issued):
    row = log(project, issued.api_key, rag_hits=2)
    admin_only = ("New project", "/edit", "/delete", "/rotate", "/revoke", "Create the key")
    for role in ("viewer", "editor"):
        client = as_role(role)
        for url in ("/admin/projects/", f"/admin/projects/{project.pk}/", "/admin/request-logs/"):
            response = client.get(url)
            assert response.status_code == 200, (role, url)
            assert [c for c in admin_only if c in response.content.decode()] == [], (role, url)
        assert "support" in client.get("/admin/projects/").content.decode()
        assert "Be brief." in client.get(f"/admin/projects/{project.pk}/").content.decode()
        assert client.get(f"/admin/request-logs/{row.pk}").status_code == 200
    admin = as_role("admin").get(f"/admin/projects/{project.pk}/").content.decode()
    assert all(control in admin for control in ("/edit", "/delete", "/rotate", "/revoke", "Create the key"))


def test_forged_posts_with_a_valid_csrf_token_are_refused(as_role, project, issued, chat_connection):
    editor = as_role("editor")
    key = issued.api_key
    for url, data in (
        ("/admin/projects/new", {"name": "x", "chat": f"connection:{chat_connection.pk}"}),
        (f"/admin/projects/{project.pk}/edit", {"name": "x", "chat": f"connection:{chat_connection.pk}"}),
        (f"/admin/projects/{project.pk}/delete", {}),
        (f"/admin/projects/{project.pk}/keys", {"name": "stolen", "scopes": "chat"}),
        (f"/admin/keys/{key.pk}/rotate", {}),
        (f"/admin/keys/{key.pk}/revoke", {}),
        (f"/admin/projects/{project.pk}/limits", {"rate_limit_rpm": "5"}),
        (f"/admin/keys/{key.pk}/edit", {"name": "stolen", "scopes": "chat", "rate_limit_rpm": "5"}),
    ):
        assert post(editor, url, data).status_code == 403, url
    key.refresh_from_db()
    assert (key.revoked_at, key.key_hash, key.name, key.rate_limit_rpm) == (None, hash_key(issued.key), "app", 0)
    assert list(Project.objects.values_list("name", "rate_limit_rpm")) == [("support", 0)]
    assert list(GatewayKey.objects.values_list("name", flat=True)) == ["app"]


# --- projects ---------------------------------------------------------------------------------


def test_an_admin_creates_edits_and_deletes_a_project(as_role, chat_connection, kb, fake_connection):
    admin = as_role("admin")
    response = post(
        admin,
        "/admin/projects/new",
        {"name": "docs", "chat": f"connection:{chat_connection.pk}", "store_id": kb.pk, "system_prompt": "Hi."},
    )
    project = Project.objects.get(name="docs")
    assert response.status_code == 302 and response.url == f"/admin/projects/{project.pk}/"
    assert (project.store, project.embedding_connection, project.system_prompt) == (kb, None, "Hi.")
    assert "Created the project “docs”" in text(admin.get(response.url))

    form = text(admin.get(f"/admin/projects/{project.pk}/edit"))
    assert "Save the project" in form
    response = post(
        admin,
        f"/admin/projects/{project.pk}/edit",
        {"name": "docs2", "chat": f"connection:{chat_connection.pk}", "embedding_connection_id": fake_connection.pk},
    )
    project.refresh_from_db()
    assert response.status_code == 302
    assert (project.name, project.store, project.embedding_connection) == ("docs2", None, fake_connection)

    response = post(admin, f"/admin/projects/{project.pk}/delete")
    assert response.status_code == 302 and not Project.objects.exists()


def test_a_project_form_error_is_shown_beside_its_field(as_role, project, local_connection):
    admin = as_role("admin")
    # The local embedding model cannot chat: the service refuses, and says so beside the field.
    response = post(admin, "/admin/projects/new", {"name": "other", "chat": f"connection:{local_connection.pk}"})
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="errors_chat"' in html and 'the local connection "local" cannot chat' in text(response)
    response = post(
        admin, "/admin/projects/new", {"name": "support", "chat": f"connection:{project.chat_connection_id}"}
    )
    assert response.status_code == 400 and "already exists" in text(response)
    assert Project.objects.count() == 1


def test_an_admin_chooses_how_follow_up_questions_are_searched_and_every_role_reads_it(as_role, project):
    admin = as_role("admin")
    form = admin.get(f"/admin/projects/{project.pk}/edit").content.decode()
    assert 'id="help_query_rewrite"' in form and '<option value="off" selected>' in form
    fields = {"name": "support", "chat": f"connection:{project.chat_connection_id}", "store_id": project.store_id}
    refused = post(admin, f"/admin/projects/{project.pk}/edit", {**fields, "query_rewrite": "always"})
    assert refused.status_code == 400 and 'id="errors_query_rewrite"' in refused.content.decode()
    response = post(admin, f"/admin/projects/{project.pk}/edit", {**fields, "query_rewrite": "llm"})
    project.refresh_from_db()
    assert response.status_code == 302 and project.query_rewrite == "llm"
    page = text(as_role("viewer").get(f"/admin/projects/{project.pk}/"))
    assert "Follow-up questions llm: a standalone question from the chat model, by the chat model" in page
    chosen = {**fields, "query_rewrite": "llm", "query_rewrite_connection_id": project.chat_connection_id}
    assert post(admin, f"/admin/projects/{project.pk}/edit", chosen).status_code == 302
    page = text(as_role("viewer").get(f"/admin/projects/{project.pk}/"))
    assert f"from the chat model, by {project.chat_connection.name}" in page


def test_a_call_whose_query_rewrite_fell_back_says_why(as_role, project, issued):
    reason = "the chat model took longer than QUERY_REWRITE_TIMEOUT (3s)"
    row = log(project, issued.api_key, query_rewrite_tokens=42, query_rewrite_reason=reason)
    page = text(as_role("viewer").get(f"/admin/request-logs/{row.pk}"))
    assert f"Query rewrite 42 tokens; fell back to the last user message: {reason}" in page


LIMITS = {
    "rate_limit_rpm": "60",
    "rate_limit_tpm": "",
    "budget_daily_tokens": "100000",
    "budget_monthly_tokens": "0",
    "budget_daily_usd": "2.5",
    "budget_monthly_usd": "40",
}


def test_an_admin_sets_a_projects_limits_on_its_page_and_every_role_reads_them(as_role, project):
    admin = as_role("admin")
    url = f"/admin/projects/{project.pk}/limits"
    response = post(admin, url, LIMITS)
    assert response.status_code == 302 and response.url == f"/admin/projects/{project.pk}/"
    project.refresh_from_db()
    assert (project.rate_limit_rpm, project.rate_limit_tpm, project.budget_daily_tokens) == (60, 0, 100_000)
    assert (project.budget_daily_usd_micros, project.budget_monthly_usd_micros) == (2_500_000, 40_000_000)
    assert (project.name, project.system_prompt) == ("support", "Be brief.")
    page = text(as_role("viewer").get(f"/admin/projects/{project.pk}/"))
    for fact in (
        "Requests a minute 60",
        "Tokens a minute no limit",
        "Tokens a day 100,000",
        "Tokens a month no limit",
        "Dollars a day $2.50",
        "Dollars a month $40.00",
    ):
        assert fact in page, fact
    assert "Save the limits" not in page

    refused = post(admin, url, {**LIMITS, "rate_limit_rpm": "-1", "budget_daily_usd": "0.0000001"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert 'id="errors_rate_limit_rpm"' in html and 'id="errors_budget_daily_usd"' in html
    assert 'value="0.0000001"' in html  # what was typed stays in its input
    project.refresh_from_db()
    assert project.rate_limit_rpm == 60


# --- keys -------------------------------------------------------------------------------------


def test_an_admin_edits_a_keys_name_scopes_expiry_and_limits_and_its_row_shows_them(as_role, project, issued):
    admin = as_role("admin")
    key = issued.api_key
    url = f"/admin/keys/{key.pk}/edit"
    form = admin.get(url)
    assert form.status_code == 200 and "Save the key" in text(form)
    assert 'name="budget_daily_usd"' in form.content.decode()
    expires = (timezone.now() + timedelta(days=3)).replace(second=0, microsecond=0)
    response = post(
        admin,
        url,
        {
            "name": "app2",
            "scopes": ["chat", "models"],
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M"),
            **LIMITS,
            "budget_daily_usd": "",
            "budget_monthly_usd": "7.25",
        },
    )
    assert response.status_code == 302 and response.url == f"/admin/projects/{project.pk}/"
    key.refresh_from_db()
    assert (key.name, key.scopes, key.expires_at, key.key_hash) == (
        "app2",
        ["chat", "models"],
        expires,
        hash_key(issued.key),
    )
    assert (
        key.rate_limit_rpm,
        key.budget_daily_tokens,
        key.budget_daily_usd_micros,
        key.budget_monthly_usd_micros,
    ) == (
        60,
        100_000,
        0,
        7_250_000,
    )
    page = text(admin.get(response.url))
    assert "Requests a minute: 60; Tokens a day: 100,000; Dollars a month: $7.25" in page

    refused = post(admin, url, {"name": "app2", "scopes": [], "expires_at": "", **LIMITS})
    assert refused.status_code == 400 and 'id="errors_scopes"' in refused.content.decode()
    key.refresh_from_db()
    assert key.scopes == ["chat", "models"]


def test_a_new_key_is_shown_once_and_kept_nowhere_but_as_its_hash(as_role, project):
    admin = as_role("admin")
    expires = (timezone.now() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
    response = post(
        admin,
        f"/admin/projects/{project.pk}/keys",
        {"name": "web", "scopes": ["chat", "models"], "expires_at": expires},
    )
    assert response.status_code == 201
    api_key = GatewayKey.objects.get(name="web")
    shown = response.context["issued"].key
    assert shown.startswith("sk-proj-") and shown in response.content.decode()
    assert api_key.key_hash == hash_key(shown) and api_key.scopes == ["chat", "models"]
    assert api_key.expires_at.strftime("%Y-%m-%dT%H:%M") == expires
    assert "Copy the key" in response.content.decode()
    # Not in the session, its cookie or a flash message: the next page no longer has it.
    assert shown not in str(dict(admin.session)) and shown not in str(admin.cookies)
    assert shown not in admin.get(f"/admin/projects/{project.pk}/").content.decode()


def test_a_key_form_error_is_shown_and_nothing_is_created(as_role, project):
    response = post(as_role("admin"), f"/admin/projects/{project.pk}/keys", {"name": "web"})
    assert response.status_code == 400
    assert 'id="errors_scopes"' in response.content.decode()
    assert not GatewayKey.objects.exists()


def test_rotating_shows_the_new_key_once_and_revoking_ends_the_key(as_role, project, issued):
    admin = as_role("admin")
    response = post(admin, f"/admin/keys/{issued.api_key.pk}/rotate")
    rotated = response.context["issued"].key
    assert response.status_code == 200 and rotated != issued.key and rotated in response.content.decode()
    issued.api_key.refresh_from_db()
    assert issued.api_key.key_hash == hash_key(rotated)

    response = post(admin, f"/admin/keys/{issued.api_key.pk}/revoke")
    assert response.status_code == 302
    issued.api_key.refresh_from_db()
    assert issued.api_key.revoked_at is not None
    page = text(admin.get(response.url))
    assert "Revoked the key “app”" in page and "No keys yet." in page


def test_the_key_table_says_when_each_key_was_last_used(as_role, project, issued):
    used = timezone.now() - timedelta(hours=3)
    GatewayKey.objects.filter(pk=issued.api_key.pk).update(last_used_at=used)
    page = text(as_role("viewer").get(f"/admin/projects/{project.pk}/"))
    assert f"{used:%Y-%m-%d %H:%M}" in page


# --- request logs -----------------------------------------------------------------------------


def test_the_request_log_filters_like_the_api_and_links_the_same_csv(as_role, project, issued):
    ok = log(project, issued.api_key, model="gpt-4o-mini")
    missing = log(project, issued.api_key, status_code=404, model="gpt-4o-mini", error="no such model")
    failed = log(project, issued.api_key, status_code=502, endpoint="retrieve")
    viewer = as_role("viewer")

    def shown(query: str) -> list[int]:
        response = viewer.get(f"/admin/request-logs/?{query}")
        return [row.pk for row, _ in response.context["rows"]]

    assert shown("") == [failed.pk, missing.pk, ok.pk]
    assert shown("status=4xx") == [missing.pk]
    assert shown("status=502") == [failed.pk]
    assert shown("endpoint=chat&model=gpt-4o-mini") == [missing.pk, ok.pk]
    assert shown(f"project={project.pk}&key={issued.api_key.pk}&status=2xx") == [ok.pk]
    response = viewer.get("/admin/request-logs/?status=4xx&endpoint=chat")
    link = urlsplit(response.context["csv"])
    assert link.path == "/admin/api/request-logs.csv"
    assert parse_qs(link.query) == {"status": ["4xx"], "endpoint": ["chat"]}
    assert response.context["csv"] in response.content.decode().replace("&amp;", "&")


def test_a_bad_filter_is_shown_beside_its_field(as_role, project):
    response = as_role("viewer").get("/admin/request-logs/?status=abc")
    assert response.status_code == 400
    assert 'id="errors_status"' in response.content.decode()
    assert "Export these as CSV" not in response.content.decode()


def test_the_request_log_pages_back_by_cursor_with_the_filters_kept(as_role, project, issued):
    rows = [log(project, issued.api_key, status_code=500) for _ in range(PAGE_SIZE + 3)]
    log(project, issued.api_key)
    viewer = as_role("viewer")
    first = viewer.get("/admin/request-logs/?status=5xx")
    assert [r.pk for r, _ in first.context["rows"]] == [r.pk for r in reversed(rows)][:PAGE_SIZE]
    older = first.context["older"]
    assert parse_qs(urlsplit(older).query)["status"] == ["5xx"]
    second = viewer.get(f"/admin/request-logs/{older}")
    assert [r.pk for r, _ in second.context["rows"]] == [r.pk for r in reversed(rows[:3])]
    assert second.context["older"] == "" and "Newest" in second.content.decode()


def test_a_call_shows_its_tokens_cost_latency_first_byte_and_sources(as_role, project, issued):
    row = log(
        project,
        issued.api_key,
        model="gpt-4o-mini",
        prompt_tokens=120,
        completion_tokens=30,
        cached_prompt_tokens=70,
        cache_write_tokens=40,
        cost_micros=1234,
        latency_ms=840,
        ttfb_ms=95,
        rag_hits=3,
        streamed=True,
    )
    page = text(as_role("viewer").get(f"/admin/request-logs/{row.pk}"))
    for fact in (
        "Prompt tokens 120",
        "of them read from the prompt cache 70",
        "of them written to the prompt cache 40",
        "Completion tokens 30",
        "Cost $0.0012",
        "Latency 840 ms",
        "Time to first byte 95 ms",
        "RAG hits 3",
        "Store searched kb",
        "chat, streamed",
    ):
        assert fact in page, fact
    assert "Answered without context" not in page
    assert as_role("viewer").get("/admin/request-logs/999999").status_code == 404


def test_a_call_answered_without_context_says_why(as_role, project, issued):
    reason = 'the store cannot embed the query: the anthropic connection "claude" cannot embed'
    row = log(project, issued.api_key, rag_skipped_reason=reason)
    page = text(as_role("viewer").get(f"/admin/request-logs/{row.pk}"))
    assert f"Answered without context {reason}" in page


# --- the overview's usage ---------------------------------------------------------------------


def test_the_overview_sums_the_last_day_and_week(as_role, project, issued):
    log(project, issued.api_key, prompt_tokens=10, completion_tokens=5, cost_micros=1_000_000)
    log(project, issued.api_key, ago=timedelta(hours=23), prompt_tokens=20, cost_micros=500_000)
    log(project, issued.api_key, ago=timedelta(days=3), embedding_tokens=100, cost_micros=250_000)
    log(project, issued.api_key, ago=timedelta(days=8), prompt_tokens=1000, cost_micros=9_000_000)
    response = as_role("viewer").get("/admin/")
    day, week = response.context["usage"]
    assert (day.total_requests, day.total_tokens, day.total_cost) == (2, 35, "$1.50")
    assert (week.total_requests, week.total_tokens, week.total_cost) == (3, 135, "$1.75")
    charts = response.context["usage_charts"]
    assert len(charts["day"]["x"]) == 25 and len(charts["week"]["x"]) == 8
    assert sum(charts["week"]["requests"]) == 3 and sum(charts["day"]["cost"]) == 1.5
    assert 'id="usage-charts"' in response.content.decode()


def queries(client, urls: list[str]) -> dict[str, int]:
    counts = {}
    for url in urls:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200, url
        counts[url] = len(captured)
    return counts


def test_each_page_runs_the_same_few_queries_whatever_the_traffic(as_role, project, issued):
    admin = as_role("admin")
    first = log(project, issued.api_key)
    urls = ["/admin/", "/admin/projects/", f"/admin/projects/{project.pk}/", "/admin/request-logs/"]
    urls.append(f"/admin/request-logs/{first.pk}")
    few = queries(admin, urls)
    for n in range(30):
        key = key_create(project=project, name=f"k{n}", scopes=None, expires_at=None).api_key
        log(project, key, ago=timedelta(hours=n * 5), tokens_estimated=bool(n % 2))
    ProjectFactory(name="second", chat_connection=project.chat_connection)
    assert queries(admin, urls) == few
    assert max(few.values()) <= 14, few
