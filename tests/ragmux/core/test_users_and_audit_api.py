"""`/admin/api/users`, `/admin/api/me/password` and `/admin/api/audit`: admins manage users, the
last admin stays, ending a user's access ends their sessions and bearer tokens at once, every
configuration change leaves one audit row with its actor and no secret, and old rows are purged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from ragmux.core.audit import MASKED, audit_record
from ragmux.core.models import AdminToken, AuditEntry
from tests.factories import PASSWORD


def test_only_admins_read_or_change_users_and_the_audit(api, personas):
    for role in ("viewer", "editor"):
        client = api(role)
        for method, url in (("GET", "/admin/api/users"), ("GET", "/admin/api/audit"), ("POST", "/admin/api/users")):
            response = client.request(method, url, json={"username": "x", "role": "admin"})
            assert response.status_code == 403
            assert response.json()["error"]["message"] == "insufficient role: this needs the admin role"
    assert not User.objects.filter(username="x").exists()


def test_an_admin_creates_changes_resets_and_deactivates_a_user(api, personas):
    admin = api("admin")
    created = admin.post("/admin/api/users", json={"username": "Erin", "role": "editor"})
    assert created.status_code == 201
    body = created.json()
    assert (body["username"], body["role"], body["is_active"]) == ("Erin", "editor", True)
    erin = User.objects.get(username="Erin")
    assert erin.check_password(body["password"])
    duplicate = admin.post("/admin/api/users", json={"username": "erin", "password": "long enough"})
    assert duplicate.status_code == 409 and "case-insensitive" in duplicate.json()["error"]["message"]
    short = admin.post("/admin/api/users", json={"username": "fay", "password": "short"})
    assert short.status_code == 400 and short.json()["error"]["fields"]["password"]
    for weak, reason in (("password", "too common"), ("12345678", "entirely numeric"), ("fayfayfay1", "similar")):
        refused = admin.post("/admin/api/users", json={"username": "fayfayfay", "password": weak})
        assert refused.status_code == 400 and reason in refused.json()["error"]["message"]

    from ragmux.core.authentication import issue_admin_token

    token = issue_admin_token(user=erin)
    erin_api = api()
    erin_api.headers["Authorization"] = f"Bearer {token}"
    assert erin_api.get("/admin/api/me").json()["role"] == "editor"

    changed = admin.patch(f"/admin/api/users/{erin.pk}", json={"role": "admin"})
    assert changed.json()["role"] == "admin"
    assert erin_api.get("/admin/api/me").status_code == 200  # a promotion keeps the session

    reset = admin.post(f"/admin/api/users/{erin.pk}/password", json={"password": "a brand new one"})
    assert reset.json() == {"ok": True}
    assert erin_api.get("/admin/api/me").status_code == 401  # the reset ended the token
    erin.refresh_from_db()
    assert erin.check_password("a brand new one")

    erin_api.headers["Authorization"] = f"Bearer {issue_admin_token(user=erin)}"
    deactivated = admin.delete(f"/admin/api/users/{erin.pk}")
    assert deactivated.json()["is_active"] is False and deactivated.json()["role"] == "admin"
    assert erin_api.get("/admin/api/me").status_code == 401
    assert not AdminToken.objects.filter(user=erin).exists()
    listed = {user["username"]: user for user in admin.get("/admin/api/users").json()}
    assert listed["Erin"]["is_active"] is False and listed["viewer"]["role"] == "viewer"


def test_the_last_active_admin_stays_and_nobody_deactivates_themselves(api, personas):
    admin = api("admin")
    me = personas["admin"].pk

    assert admin.patch(f"/admin/api/users/{me}", json={"is_active": False}).json()["error"]["message"] == (
        "you cannot deactivate your own account"
    )
    demoted = admin.patch(f"/admin/api/users/{me}", json={"role": "viewer"})
    assert demoted.status_code == 409
    assert demoted.json()["error"] == {
        "message": "cannot remove the last active admin",
        "type": demoted.json()["error"]["type"],
        "code": "last_admin",
    }
    second = User.objects.create_user("second")
    second.groups.add(personas["admin"].groups.get())
    assert admin.patch(f"/admin/api/users/{me}", json={"role": "viewer"}).status_code == 200
    # Now `second` is the last one: a deactivation by someone else is refused too.
    from ragmux.core.accounts import user_update

    with pytest.raises(Exception, match="cannot remove the last active admin"):
        user_update(user=second, is_active=False, actor=None)


def test_a_user_changes_their_own_password_and_keeps_this_token_only(api, personas):
    from ragmux.core.authentication import issue_admin_token

    viewer = api("viewer")
    other = api()
    other.headers["Authorization"] = f"Bearer {issue_admin_token(user=personas['viewer'])}"

    wrong = viewer.post("/admin/api/me/password", json={"current_password": "nope", "new_password": "new password"})
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "wrong_password"
    weak = viewer.post("/admin/api/me/password", json={"current_password": PASSWORD, "new_password": "short"})
    assert weak.status_code == 400 and "new_password" in weak.json()["error"]["fields"]
    done = viewer.post("/admin/api/me/password", json={"current_password": PASSWORD, "new_password": "new password"})
    assert done.json() == {"ok": True}
    assert viewer.get("/admin/api/me").status_code == 200
    assert other.get("/admin/api/me").status_code == 401
    entry = AuditEntry.objects.get(action="user.change_password")
    assert (entry.actor_username, entry.after) == ("viewer", {"password": MASKED})


def test_each_change_leaves_one_row_with_its_actor_and_no_secret(api, personas, fake_upstream, settings):
    admin = api("admin")
    connection = admin.post(
        "/admin/api/models",
        json={
            "name": "up",
            "provider_type": "openai",
            "base_url": f"{fake_upstream.url}/v1",
            "model_name": "text-embedding-3-small",
            "api_key": "sk-secret-secret-9999",
        },
    ).json()
    admin.put(
        f"/admin/api/models/{connection['id']}",
        json={
            "name": "up",
            "provider_type": "openai",
            "base_url": f"{fake_upstream.url}/v1",
            "model_name": "text-embedding-3-small",
            "api_key": "sk-other-secret-9999",
        },
    )
    store = admin.post("/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": connection["id"]})
    admin.patch(f"/admin/api/rag-stores/{store.json()['id']}", json={"top_k": 7})
    admin.patch(f"/admin/api/rag-stores/{store.json()['id']}", json={"top_k": 7})  # no change, no row
    project = admin.post(
        "/admin/api/projects", json={"name": "app", "chat_connection_id": connection["id"], "system_prompt": ""}
    ).json()
    key = admin.post(f"/admin/api/projects/{project['id']}/keys", json={"name": "k"}).json()
    admin.post(f"/admin/api/keys/{key['api_key']['id']}/rotate")
    admin.delete(f"/admin/api/keys/{key['api_key']['id']}")
    admin.delete(f"/admin/api/rag-stores/{store.json()['id']}")

    audit = admin.get("/admin/api/audit", params={"page_size": 100}).json()
    actions = [entry["action"] for entry in reversed(audit["entries"])]
    assert actions == [
        "connection.create",
        "connection.update",
        "store.create",
        "store.update",
        "project.create",
        "key.create",
        "key.rotate",
        "key.revoke",
        "store.delete",
    ]
    assert {entry["actor_username"] for entry in audit["entries"]} == {"admin"}
    by_action = {entry["action"]: entry for entry in audit["entries"]}
    assert by_action["store.update"]["before"] == {"top_k": 5} and by_action["store.update"]["after"] == {"top_k": 7}
    assert by_action["connection.update"]["before"] == {"api_key_masked": "sk-…9999 (replaced)"}
    rotated = by_action["key.rotate"]
    assert rotated["before"]["prefix"] != rotated["after"]["prefix"]
    text = str(audit)
    assert "secret" not in text and key["key"] not in text and "key_hash" not in text


def test_the_audit_filters_and_pages(api, personas):
    def row(actor, object_type, object_id, days_ago):
        entry = audit_record(
            actor=actor, action=f"{object_type}.update", object_type=object_type, object_id=object_id, object_repr="x"
        )
        AuditEntry.objects.filter(pk=entry.pk).update(created_at=timezone.now() - timedelta(days=days_ago))

    row(personas["admin"], "store", 1, 3)
    row(personas["admin"], "store", 2, 2)
    row(None, "price", 1, 1)
    admin = api("admin")

    def ids(**params):
        body = admin.get("/admin/api/audit", params=params).json()
        return [(e["actor_username"], e["object_type"], e["object_id"]) for e in body["entries"]], body

    assert ids(actor="SYSTEM")[0] == [("system", "price", 1)]
    assert ids(object_type="store", object_id=2)[0] == [("admin", "store", 2)]
    since = (timezone.now() - timedelta(days=2, hours=12)).isoformat()
    until = (timezone.now() - timedelta(days=1, hours=12)).isoformat()
    assert ids(since=since, until=until)[0] == [("admin", "store", 2)]
    page_two, body = ids(page_size=2, page=2)
    assert page_two == [("admin", "store", 1)] and (body["total"], body["pages"]) == (3, 2)
    past_the_last, body = ids(page_size=2, page=40)
    assert past_the_last == page_two and (body["page"], body["pages"]) == (2, 2)
    assert admin.get("/admin/api/audit", params={"object_type": "nothing"}).status_code == 400


def test_rows_past_the_retention_are_purged_and_zero_keeps_them(settings, personas):
    from ragmux.core.tasks import purge_audit_entries

    for days_ago in (400, 10):
        entry = audit_record(actor=None, action="store.delete", object_type="store", object_id=1, object_repr="kb")
        AuditEntry.objects.filter(pk=entry.pk).update(created_at=timezone.now() - timedelta(days=days_ago))

    settings.AUDIT_RETENTION_DAYS = 0
    assert purge_audit_entries() == 0
    settings.AUDIT_RETENTION_DAYS = 365
    assert purge_audit_entries() == 1
    assert AuditEntry.objects.count() == 1
    assert settings.CELERY_BEAT_SCHEDULE["purge-audit-entries"]["task"] == "ragmux.purge_audit"


def test_secrets_are_masked_whatever_a_caller_passes(db):
    entry = audit_record(
        actor=None,
        action="user.update",
        object_type="user",
        object_id=1,
        object_repr="u",
        before={"password": "old", "api_key_sealed": b"x", "name": "a"},
        after={"password": "new", "api_key_sealed": b"y", "name": "b"},
    )
    # The masked values are equal on both sides, so only the real change is kept.
    assert (entry.before, entry.after, entry.actor_username) == ({"name": "a"}, {"name": "b"}, "system")
