"""The public ids of files, vector stores and their file batches: opaque, made here and
recognised here, so a malformed id is refused as not found before any query."""

from __future__ import annotations

import re
import secrets

FILE_PREFIX = "file-"
VECTOR_STORE_PREFIX = "vs_"
FILE_BATCH_PREFIX = "vsfb_"
# A document of a store that no file of /v1/files became (one an admin uploaded in the
# dashboard into the store given to a project) is named in search results by this id.
DOCUMENT_FILE_PREFIX = "file-doc-"
_RANDOM_CHARS = 24
_ID = re.compile(r"(file-|vs_|vsfb_)[0-9a-f]{24}")


def new_file_id() -> str:
    return FILE_PREFIX + secrets.token_hex(_RANDOM_CHARS // 2)


def new_vector_store_id() -> str:
    return VECTOR_STORE_PREFIX + secrets.token_hex(_RANDOM_CHARS // 2)


def new_file_batch_id() -> str:
    return FILE_BATCH_PREFIX + secrets.token_hex(_RANDOM_CHARS // 2)


def is_id(text: str, prefix: str) -> bool:
    """Whether ``text`` could be an id made here with ``prefix``."""
    return isinstance(text, str) and text.startswith(prefix) and _ID.fullmatch(text) is not None


def document_file_id(document_id: int) -> str:
    """The stable id search results give a document no uploaded file became: `file-doc-<id>`.
    It names no file of `/v1/files` (retrieving it is a 404)."""
    return f"{DOCUMENT_FILE_PREFIX}{document_id}"
