"""Bulk ingestion of a local folder (`ragmux ingest-dir`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ingestion.parsing import SUPPORTED_EXTENSIONS
from ingestion.services import IncomingFile, QuotaExceeded, document_upload, sanitise_filename
from stores.models import RagStore


class DirectoryRefused(Exception):
    """The folder or the store is not usable; nothing was written."""


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    title: str
    size: int


def plan_directory(path: Path) -> list[PlannedFile]:
    """Every supported file under ``path``, in a stable order."""
    if not path.is_dir():
        raise DirectoryRefused(f"docs path is not a directory: {path}")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_EXTENSIONS)
    return [PlannedFile(path=p, title=p.stem, size=p.stat().st_size) for p in files]


def find_store(name: str) -> RagStore:
    store = RagStore.objects.filter(name=name).first()
    if store is None:
        raise DirectoryRefused(f"no RAG store named {name!r}")
    return store


@dataclass
class DirectoryOutcome:
    uploaded: int = 0
    duplicates: int = 0
    refused: list[str] | None = None
    stopped: str = ""


def ingest_directory(*, store: RagStore, files: list[PlannedFile]) -> DirectoryOutcome:
    """Uploads the files one by one; a duplicate is skipped, a full quota stops the run."""
    outcome = DirectoryOutcome(refused=[])
    for planned in files:
        incoming = IncomingFile(
            filename=sanitise_filename(planned.path.name),
            data=planned.path.read_bytes(),
            title=planned.title,
            source=str(planned.path),
        )
        try:
            result = document_upload(store=store, files=[incoming])
        except Exception as exc:  # noqa: BLE001 - one unreadable file must not stop the others
            outcome.refused.append(f"{planned.path}: {exc}")
            continue
        outcome.uploaded += len(result.documents)
        if isinstance(result.refusal, QuotaExceeded):
            outcome.stopped = f"{planned.path}: {result.refusal.message}"
            return outcome
        for skipped in result.skipped:
            if skipped.code == "duplicate_document":
                outcome.duplicates += 1
            else:
                outcome.refused.append(f"{planned.path}: {skipped.message}")
    return outcome
