"""What happened to each file of an upload, in words, from the admission service's result."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ingestion.serializers import UploadFormInput
from ingestion.services import UploadResult
from ragmux.core.errors import InvalidInput, flatten_validation
from stores.choices import DocumentStatus

VERDICT_OF_SKIP = {
    "duplicate_document": "duplicate",
    "unsupported_format": "unsupported format",
    "empty_file": "empty",
    "text_too_large": "too large",
}


@dataclass(frozen=True)
class FileOutcome:
    filename: str
    verdict: str
    detail: str
    accepted: bool = False
    document_id: int | None = None


def upload_attributes(post) -> dict:
    """The attributes an upload form gives every file (its JSON text, as the API's multipart field
    takes it); InvalidInput saying why when they are not valid."""
    form = UploadFormInput(data={"attributes": post["attributes"]} if post.get("attributes", "").strip() else {})
    if not form.is_valid():
        (messages,) = flatten_validation(form.errors).values()
        raise InvalidInput(f"The attributes were refused: {' '.join(messages)}", field="attributes")
    return form.validated_data["attributes"]


def upload_outcomes(filenames: list[str], result: UploadResult) -> list[FileOutcome]:
    """One outcome per file sent. The service handles the files in order and stops at the first
    one over quota, so the files it did not reach are those after it."""
    outcomes = []
    for document in result.documents:
        if document.status == DocumentStatus.FAILED:
            outcomes.append(FileOutcome(document.filename, "backlog full", document.error, document_id=document.pk))
        else:
            outcomes.append(
                FileOutcome(document.filename, "accepted", "queued for ingestion", True, document_id=document.pk)
            )
    for skipped in result.skipped:
        outcomes.append(FileOutcome(skipped.filename, VERDICT_OF_SKIP.get(skipped.code, "not stored"), skipped.message))
    refusal = result.refusal
    handled = len(result.documents) + len(result.skipped)
    if refusal is not None and refusal.code == "store_quota":
        stopped, *unreached = filenames[handled:]
        outcomes.append(FileOutcome(stopped, "over quota", refusal.message))
        outcomes.extend(
            FileOutcome(name, "not stored", "the upload stopped at the file over quota") for name in unreached
        )
    elif refusal is not None and handled == 0:
        # Refused as a whole before any file was looked at (too large, too many files, none).
        outcomes.extend(FileOutcome(name, "not stored", refusal.message) for name in filenames or [""])
    return outcomes


def summary(outcomes: list[FileOutcome]) -> str:
    """ "2 accepted, 1 duplicate (3 files)." The accepted first, then each refusal, the most
    frequent first: the order the upload script's summary uses too."""
    accepted = Counter(outcome.verdict for outcome in outcomes if outcome.accepted)
    refused = Counter(outcome.verdict for outcome in outcomes if not outcome.accepted)
    parts = ", ".join(f"{n} {verdict}" for verdict, n in [*accepted.most_common(), *refused.most_common()])
    return f"{parts} ({len(outcomes)} file{'s' if len(outcomes) != 1 else ''})."
