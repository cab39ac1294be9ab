"""Office files are zip archives: opened here with bounds against decompression bombs, for the
readers (our own for docx, python-pptx, openpyxl, ebooklib) to read from afterwards.

zipfile never inflates a member past the size its header declares (it stops there, or fails the
CRC), so a member whose declared sizes pass the checks cannot grow beyond them when a library
reads it.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from .types import MIB, ParseError, describe_size

MAX_MEMBER_SIZE = 32 * MIB
MAX_EXPANSION_RATIO = 100
# What all members of one archive may inflate to together (a deck's pictures, an e-book's
# chapters), and its markup alone: the readers parse all of a file's markup into trees of
# several times its size, in the worker's memory.
MAX_ARCHIVE_SIZE = 256 * MIB
MAX_MARKUP_SIZE = 64 * MIB
_MARKUP_SUFFIXES = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx")

# Encrypted Office files (Word, Excel, PowerPoint alike) are not zips but OLE compound files,
# holding the encrypted zip in a stream of this name; so are the legacy .doc/.xls/.ppt formats.
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")

# zipfile lets some damage through as it finds it: zlib.error from a broken deflate stream,
# ValueError from seeking to a negative offset when the directory's offsets do not add up.
READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    ValueError,
    NotImplementedError,
    RuntimeError,
    OSError,
    EOFError,
)


def open_archive(data: bytes, kind: str) -> zipfile.ZipFile:
    """The archive of a ``kind`` file ("docx", "xlsx"…), whose every member passed the size checks."""
    if data.startswith(OLE_SIGNATURE):
        raise ParseError(ole_reason(data, kind))
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, EOFError):
        raise ParseError(f"the file is not a valid {kind} (not a zip archive)") from None
    # A zip all the same, whose directory zipfile cannot read: a name flagged as UTF-8 that is not (ValueError),
    # a newer zip version than it supports (NotImplementedError).
    except (ValueError, NotImplementedError) as exc:
        raise ParseError(f"the {kind}'s zip archive cannot be read ({exc})") from exc
    total = markup = 0
    for member in archive.infolist():
        check_declared_size(member)
        total += member.file_size
        if member.filename.lower().endswith(_MARKUP_SUFFIXES):
            markup += member.file_size
    if total > MAX_ARCHIVE_SIZE:
        raise ParseError(
            f"the {kind}'s files are larger than {describe_size(MAX_ARCHIVE_SIZE)} uncompressed together (the limit)"
        )
    if markup > MAX_MARKUP_SIZE:
        raise ParseError(
            f"the {kind}'s XML is larger than {describe_size(MAX_MARKUP_SIZE)} uncompressed together (the limit)"
        )
    return archive


def check_archive(data: bytes, kind: str) -> None:
    """For the readers that open the zip themselves: the same checks, before they do."""
    open_archive(data, kind).close()


def ole_reason(data: bytes, kind: str) -> str:
    if _ENCRYPTED_PACKAGE in data:
        return f"the {kind} is encrypted (password-protected) and cannot be read; save it without a password"
    return f"the file is not a {kind} but an older binary Office file (OLE); save it as {kind}"


def check_declared_size(member: zipfile.ZipInfo) -> None:
    if member.file_size > MAX_MEMBER_SIZE:
        raise ParseError(f"{member.filename} is larger than {describe_size(MAX_MEMBER_SIZE)} uncompressed (the limit)")
    if member.file_size > MAX_EXPANSION_RATIO * max(member.compress_size, 1):
        raise ParseError(
            f"{member.filename} expands more than {MAX_EXPANSION_RATIO}× when uncompressed (a suspected zip bomb)"
        )


def read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, kind: str) -> bytes:
    """The member's bytes; the bytes actually inflated are counted too, since zip headers can lie."""
    limit = min(MAX_MEMBER_SIZE, MAX_EXPANSION_RATIO * max(member.compress_size, 1))
    try:
        with archive.open(member) as stream:
            content = stream.read(limit + 1)
    except READ_ERRORS as exc:
        raise ParseError(f"the {kind} is damaged ({member.filename}: {exc})") from exc
    if len(content) > limit:
        raise ParseError(f"{member.filename} inflates beyond the size its zip header declares")
    return content
