"""`ragmux ingest-dir` as an operator runs it."""

import pytest

from stores.models import Document
from stores.services import store_create
from tests.helpers import run_ragmux

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    (folder / "nested").mkdir(parents=True)
    (folder / "alpha.md").write_text("# Alpha\n\nfirst")
    (folder / "nested" / "beta.txt").write_text("second one")
    (folder / "skip.exe").write_bytes(b"MZ")
    return folder


@pytest.fixture
def store(fake_connection):
    return store_create(name="demo", values={"embedding_connection_id": fake_connection.id})


def test_dry_run_lists_files_and_writes_nothing(subprocess_env, docs, store):
    result = run_ragmux(subprocess_env, "ingest-dir", "--store", "demo", "--path", str(docs), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{docs / 'alpha.md'}\talpha\t14 bytes",
        f"{docs / 'nested' / 'beta.txt'}\tbeta\t10 bytes",
        "dry_run=true documents=2",
    ]
    assert not Document.objects.exists()


def test_ingest_uploads_every_supported_file_and_skips_duplicates(subprocess_env, docs, store):
    first = run_ragmux(subprocess_env, "ingest-dir", "--store", "demo", "--path", str(docs))
    assert first.returncode == 0, first.stderr
    assert "uploaded=2 duplicates=0 refused=0 store='demo'" in first.stdout
    assert sorted(Document.objects.values_list("filename", "title", "status")) == [
        ("alpha.md", "alpha", "pending"),
        ("beta.txt", "beta", "pending"),
    ]
    again = run_ragmux(subprocess_env, "ingest-dir", "--store", "demo", "--path", str(docs))
    assert "uploaded=0 duplicates=2" in again.stdout
    assert Document.objects.count() == 2


@pytest.mark.parametrize(
    ("store_name", "path_of", "message"),
    [
        ("demo", lambda docs: docs / "missing", "Error: docs path is not a directory: "),
        ("nope", lambda docs: docs, "Error: no RAG store named 'nope'"),
    ],
)
def test_a_bad_path_or_store_fails_before_anything_is_written(
    subprocess_env, docs, store, store_name, path_of, message
):
    result = run_ragmux(subprocess_env, "ingest-dir", "--store", store_name, "--path", str(path_of(docs)))
    assert result.returncode == 1
    assert message in result.stderr
    assert not Document.objects.exists()
