"""Writes the hostile fixtures of this folder; the tests also import its builders for files made on the fly.

Run from the repository root: .venv/bin/python tests/ingestion/files/make_hostile.py
The output is deterministic, so regenerating leaves the committed files unchanged.
"""

from __future__ import annotations

import hashlib
import io
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---- PDF ------------------------------------------------------------------------------------------

# The padding string of the PDF standard security handler (ISO 32000-1, 7.6.3.3).
_PASSWORD_PAD = bytes.fromhex("28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a")
_DOCUMENT_ID = bytes.fromhex("0123456789abcdef0123456789abcdef")
_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
CATALOG = b"<< /Type /Catalog /Pages 2 0 R >>"
_GREY_IMAGE = b"/Type /XObject /Subtype /Image /Width 64 /Height 64 /ColorSpace /DeviceGray /BitsPerComponent 8 "


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF whose object n is objects[n - 1]; object 1 must be the catalog."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_offset = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_offset
    return bytes(out)


def references(numbers: list[int]) -> bytes:
    return b" ".join(b"%d 0 R" % number for number in numbers)


def page_tree(kids: list[int], *, count: int) -> bytes:
    return b"<< /Type /Pages /Count %d /Kids [%s] >>" % (count, references(kids))


def text_page(*, contents: int, font: int) -> bytes:
    return b"<< /Type /Page /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (
        font,
        contents,
    )


def stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n%s\nendstream" % (len(data), extra, data)


def page_content(paragraphs: list[list[str]]) -> bytes:
    """Lines 14 pt apart, paragraphs 42 pt apart: far enough for pdfminer to put them in separate text boxes."""
    commands = [b"BT /F1 12 Tf 14 TL 72 760 Td"]
    for paragraph in paragraphs:
        commands += [b"(%s) '" % _pdf_string(line) for line in paragraph]
        commands.append(b"T* T*")
    commands.append(b"ET")
    return b"\n".join(commands)


def _pdf_string(text: str) -> bytes:
    return text.encode("latin-1").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def text_pdf(pages: list[list[list[str]]], *, encrypt_stream: Callable[[int, bytes], bytes] | None = None) -> bytes:
    """pages[i] is a list of paragraphs, each a list of lines.

    Objects: catalog, page tree, font, then a page and its content stream for each page.
    """
    page_numbers = [4 + 2 * index for index in range(len(pages))]
    objects = [CATALOG, page_tree(page_numbers, count=len(pages)), _FONT]
    for number, paragraphs in zip(page_numbers, pages, strict=True):
        content = page_content(paragraphs)
        if encrypt_stream is not None:
            content = encrypt_stream(number + 1, content)
        objects += [text_page(contents=number + 1, font=3), stream(content)]
    return pdf_file(objects)


def many_pages_pdf(page_count: int) -> bytes:
    """A legitimate, merely long PDF: every page has three paragraphs of text."""
    paragraph = ["The quick brown fox jumps over the lazy dog again and again,"] * 4
    return text_pdf([[paragraph] * 3 for _ in range(page_count)])


def scanned_pdf() -> bytes:
    """Two pages that only paint a grey image, as a scanner would: no text layer at all."""
    pixels = bytes(range(0, 256, 4)) * 64
    image = stream(pixels, _GREY_IMAGE)
    page = b"<< /Type /Page /MediaBox [0 0 612 792] /Resources << /XObject << /Im1 3 0 R >> >> /Contents 4 0 R >>"
    content = stream(b"q 468 0 0 648 72 72 cm /Im1 Do Q")
    return pdf_file([CATALOG, page_tree([5, 6], count=2), image, content, page, page])


def one_page_pdf(tree: bytes, text: str, more_objects: tuple[bytes, ...] = ()) -> bytes:
    """Object 2 is `tree`, object 3 the page (content 4, font 5), and `more_objects` are numbered from 6."""
    content = stream(page_content([[text]]))
    return pdf_file([CATALOG, tree, text_page(contents=4, font=5), content, _FONT, *more_objects])


def self_referencing_tree_pdf() -> bytes:
    """The page tree lists itself among its own kids, after one real page."""
    return one_page_pdf(page_tree([3, 2], count=2), "Looping tree")


def huge_count_pdf(page_references: int = 20_000) -> bytes:
    """/Count claims a million pages; /Kids really lists one page object `page_references` times."""
    return one_page_pdf(page_tree([3] * page_references, count=1_000_000), "Same page again")


def nested_tree_pdf(depth: int) -> bytes:
    """A chain of `depth` page tree nodes (2, then 6, 7, …), each the only kid of the one before, ending in the page."""
    chain = [2, *range(6, depth + 5)]
    kids = [*chain[1:], 3]
    deeper_nodes = tuple(page_tree([kid], count=1) for kid in kids[1:])
    return one_page_pdf(page_tree([kids[0]], count=1), "Deep down", deeper_nodes)


def wide_tree_pdf(empty_nodes: int) -> bytes:
    """One page and `empty_nodes` references to a page tree node without kids: few pages, many nodes."""
    return one_page_pdf(page_tree([3] + [6] * empty_nodes, count=1), "One page", (page_tree([], count=0),))


def _rc4(key: bytes, data: bytes) -> bytes:
    state = list(range(256))
    j = 0
    for i in range(256):
        j = (j + state[i] + key[i % len(key)]) % 256
        state[i], state[j] = state[j], state[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + state[i]) % 256
        state[i], state[j] = state[j], state[i]
        out.append(byte ^ state[(state[i] + state[j]) % 256])
    return bytes(out)


def _encryption_dictionary(user_entry: bytes, owner_entry: bytes) -> bytes:
    return b"/Encrypt << /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >> /ID [<%s> <%s>] " % (
        owner_entry.hex().encode(),
        user_entry.hex().encode(),
        _DOCUMENT_ID.hex().encode(),
        _DOCUMENT_ID.hex().encode(),
    )


def encrypted_pdf(*, empty_user_password: bool) -> bytes:
    """RC4-40 (revision 2): with an empty user password anyone may open it, otherwise it needs a password."""
    permissions = struct.pack("<i", -4)
    user_password = b"" if empty_user_password else b"user secret"
    padded_user = (user_password + _PASSWORD_PAD)[:32]
    owner_entry = _rc4(hashlib.md5((b"owner secret" + _PASSWORD_PAD)[:32]).digest()[:5], padded_user)
    file_key = hashlib.md5(padded_user + owner_entry + permissions + _DOCUMENT_ID).digest()[:5]
    user_entry = _rc4(file_key, _PASSWORD_PAD)

    def encrypt_stream(object_number: int, data: bytes) -> bytes:
        object_key = hashlib.md5(file_key + object_number.to_bytes(3, "little") + b"\x00\x00").digest()[:10]
        return _rc4(object_key, data)

    plain = text_pdf([[["Sealed text"]]], encrypt_stream=encrypt_stream)
    return plain.replace(b"/Root 1 0 R ", b"/Root 1 0 R " + _encryption_dictionary(user_entry, owner_entry))


def encrypted_pdf_partly_unreadable() -> bytes:
    """RC4-40 with an empty user password, one page painting an image (a stream that decrypts) and
    drawing text (a stream sealed with another key, as a handler the reader gets wrong leaves it):
    all the reader finds is an image, as in a scan."""
    permissions = struct.pack("<i", -4)
    padded_user = _PASSWORD_PAD
    owner_entry = _rc4(hashlib.md5((b"owner secret" + _PASSWORD_PAD)[:32]).digest()[:5], padded_user)
    file_key = hashlib.md5(padded_user + owner_entry + permissions + _DOCUMENT_ID).digest()[:5]

    def sealed(object_number: int, data: bytes, key: bytes = file_key) -> bytes:
        return _rc4(hashlib.md5(key + object_number.to_bytes(3, "little") + b"\x00\x00").digest()[:10], data)

    image = stream(sealed(3, bytes(range(0, 256, 4)) * 64), _GREY_IMAGE)
    painting = stream(sealed(4, b"q 468 0 0 648 72 72 cm /Im1 Do Q"))
    text = stream(sealed(5, page_content([["Sealed text"]]), key=b"wrong"))
    page = (
        b"<< /Type /Page /MediaBox [0 0 612 792] /Resources << /XObject << /Im1 3 0 R >> /Font << /F1 7 0 R >> >> "
        b"/Contents [4 0 R 5 0 R] >>"
    )
    plain = pdf_file([CATALOG, page_tree([6], count=1), image, painting, text, page, _FONT])
    user_entry = _rc4(file_key, _PASSWORD_PAD)
    return plain.replace(b"/Root 1 0 R ", b"/Root 1 0 R " + _encryption_dictionary(user_entry, owner_entry))


def random_bytes(size: int = 4096, seed: int = 20240601) -> bytes:
    return random.Random(seed).randbytes(size)


# ---- DOCX -----------------------------------------------------------------------------------------

_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Override PartName="/word/document.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_W_NAMESPACE = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def document_xml(body: bytes) -> bytes:
    return b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document %s><w:body>%s</w:body></w:document>' % (
        _W_NAMESPACE,
        body,
    )


def docx_file(parts: dict[str, bytes]) -> bytes:
    """A zip with fixed timestamps (so regenerating is byte-identical) holding the given parts."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in {"[Content_Types].xml": _CONTENT_TYPES, **parts}.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return buffer.getvalue()


def repeated_text_docx(text_bytes: int) -> bytes:
    """One paragraph repeated until word/document.xml holds `text_bytes` bytes of text: it deflates about 300×."""
    paragraph = b"<w:p><w:r><w:t>" + b"all work and no play " * 48 + b"</w:t></w:r></w:p>"
    return docx_file({"word/document.xml": document_xml(paragraph * (text_bytes // len(paragraph)))})


def understated_size_docx() -> bytes:
    """A docx whose central directory claims word/document.xml inflates to 1000 bytes; it really inflates to 1 MiB."""
    archive = bytearray(repeated_text_docx(1024 * 1024))
    entry = _central_directory_entry(archive, b"word/document.xml")
    archive[entry + 24 : entry + 28] = struct.pack("<I", 1000)
    return bytes(archive)


def _central_directory_entry(archive: bytes, name: bytes) -> int:
    """Offset of the central directory header of `name` (its file name starts 46 bytes in)."""
    entry = archive.index(b"PK\x01\x02")
    while archive[entry + 46 : entry + 46 + len(name)] != name:
        entry = archive.index(b"PK\x01\x02", entry + 4)
    return entry


# ---- the committed files --------------------------------------------------------------------------

HOSTILE_FILES = {
    "self-referencing-page-tree.pdf": self_referencing_tree_pdf,
    "huge-page-count.pdf": huge_count_pdf,
    "encrypted.pdf": lambda: encrypted_pdf(empty_user_password=False),
    "scanned.pdf": scanned_pdf,
    "random-bytes.pdf": random_bytes,
    "zip-bomb.docx": lambda: repeated_text_docx(40 * 1024 * 1024),
    "not-a-zip.docx": lambda: b"This is plain text that merely carries a .docx name.\n",
}


def main() -> None:
    for name, build in HOSTILE_FILES.items():
        (HERE / name).write_bytes(build())
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
