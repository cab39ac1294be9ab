"""`ragmux backup` and `ragmux restore` as an operator runs them, into a second, empty database."""

import io
import json
import stat
import tarfile
import uuid

import httpx
import psycopg
import pytest

from ingestion.services import IncomingFile, document_upload
from ragmux.core.crypto import generate_key
from ragmux.launch.backup import BackupFailed, find_pg_tool, read_backup
from stores.services import store_create
from tests.helpers import run_ragmux, web_process

RESTORED_CHECK = """
import json
from gateway.connections.credentials import connection_key_aad
from gateway.connections.models import ModelConnection
from ragmux.core.crypto import unseal
from retrieval.search import store_search
from stores.models import RagStore
connection = ModelConnection.objects.get(name="fake-openai")
result = store_search(store=RagStore.objects.get(name="kb"), query="anemometer readings")
print(json.dumps({
    "key": unseal(connection.api_key_sealed, aad=connection_key_aad(connection.pk)).decode(),
    "hits": [hit.filename for hit in result.hits],
}))
"""


KEY_REENTRY_CHECK = """
import json
from gateway.connections.models import ModelConnection
from stores.models import Chunk, Document
connection = ModelConnection.objects.get(name="fake-openai")
print(json.dumps({
    "sealed": connection.api_key_sealed is not None,
    "ok": connection.last_test_ok,
    "error": connection.last_test_error,
    "documents": sorted(Document.objects.values_list("filename", flat=True)),
    "chunks": Chunk.objects.count(),
}))
"""


@pytest.fixture
def empty_database(subprocess_env):
    """A second database on the suite's server, as an operator would create for a restore."""
    name = f"restore_{uuid.uuid4().hex[:12]}"
    server = subprocess_env["DATABASE_URL"].rsplit("/", 1)[0].replace("postgres://", "postgresql://")
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield {**subprocess_env, "DATABASE_URL": subprocess_env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + name}
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_backup_restores_into_an_empty_database_and_searches(
    subprocess_env, empty_database, fake_connection, ingest_now, tmp_path
):
    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    texts = {"weather.txt": "anemometer readings from the weather station", "other.txt": "a note about lunch"}
    document_upload(store=store, files=[IncomingFile(filename=name, data=b.encode()) for name, b in texts.items()])
    ingest_now()

    made = run_ragmux(subprocess_env, "backup", "--output", str(tmp_path))
    assert made.returncode == 0, made.stderr
    (backup,) = tmp_path.glob("ragmux-backup-*.tar")
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert str(backup) in made.stdout and "2 documents" in made.stdout
    raw = backup.read_bytes()
    assert subprocess_env["RAGMUX_ENCRYPTION_KEY"].encode() not in raw
    assert b"sk-fake-key-000000000000" not in raw  # the credential travels sealed
    with tarfile.open(backup) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
    assert manifest["counts"]["documents"] == 2 and manifest["counts"]["connections"] == 1
    assert manifest["encryption_key_check"]
    assert manifest["pg_dump_major"] >= manifest["postgres_server_major"]

    other_key = {**empty_database, "RAGMUX_ENCRYPTION_KEY": generate_key()}
    without_its_key = run_ragmux(other_key, "restore", str(backup))
    assert without_its_key.returncode == 0, without_its_key.stderr
    assert "1 connection(s) need theirs entered again (fake-openai)" in without_its_key.stdout
    checked = run_ragmux(other_key, "manage", "shell", "-c", KEY_REENTRY_CHECK)
    assert checked.returncode == 0, checked.stderr
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    assert found["sealed"] is False and found["ok"] is False and "enter it again" in found["error"]
    assert found["documents"] == ["other.txt", "weather.txt"] and found["chunks"] == 2  # everything else

    restored = run_ragmux(empty_database, "restore", "--replace", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert "2 documents" in restored.stdout
    checked = run_ragmux(empty_database, "manage", "shell", "-c", RESTORED_CHECK)
    assert checked.returncode == 0, checked.stderr
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    assert found["key"] == "sk-fake-key-000000000000"
    assert found["hits"][0] == "weather.txt"

    again = run_ragmux(empty_database, "restore", str(backup))
    assert again.returncode == 1
    assert "already holds a ragmux" in again.stderr
    replaced = run_ragmux(empty_database, "restore", "--replace", str(backup))
    assert replaced.returncode == 0, replaced.stderr


def test_a_damaged_backup_is_refused_before_anything_is_restored(tmp_path):
    manifest = json.dumps({"format": "ragmux-backup/1", "dump_sha256": "0" * 64}).encode()
    path = tmp_path / "damaged.tar"
    with tarfile.open(path, "w") as archive:
        for name, body in (("manifest.json", manifest), ("database.dump", b"PGDMP not really")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    (tmp_path / "out").mkdir()
    with pytest.raises(BackupFailed, match="damaged"):
        read_backup(path, tmp_path / "out")


def test_an_archive_that_is_not_a_backup_is_refused(tmp_path):
    path = tmp_path / "other.tar"
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("../../etc/passwd")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(BackupFailed, match="not a ragmux backup"):
        read_backup(path, tmp_path)
    assert not (tmp_path.parent.parent / "etc" / "passwd").exists()


def test_no_dump_tool_older_than_the_server_is_used():
    with pytest.raises(BackupFailed, match="no pg_dump of PostgreSQL 99 or newer"):
        find_pg_tool("pg_dump", 99)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_restored_backup_holds_no_dashboard_session(subprocess_env, empty_database, personas, tmp_path):
    from django.conf import settings
    from django.test import Client

    browser = Client()
    browser.force_login(personas["admin"])
    cookie = browser.cookies[settings.SESSION_COOKIE_NAME].value
    with web_process(subprocess_env) as web:
        live = httpx.get(f"{web.url}/admin/", cookies={settings.SESSION_COOKIE_NAME: cookie})
    assert live.status_code == 200  # the cookie is a login on the instance that made it

    made = run_ragmux(subprocess_env, "backup", "--output", str(tmp_path))
    assert made.returncode == 0, made.stderr
    (backup,) = tmp_path.glob("ragmux-backup-*.tar")
    restored = run_ragmux(empty_database, "restore", str(backup))
    assert restored.returncode == 0, restored.stderr

    with web_process(empty_database) as web:
        replayed = httpx.get(f"{web.url}/admin/", cookies={settings.SESSION_COOKIE_NAME: cookie})
    assert replayed.status_code == 302 and replayed.headers["location"].startswith(settings.LOGIN_URL)
