"""OCR of real scans: real text PDFs rasterised into image-only PDFs, read back by OCR, and the
OCR words compared with each page's own text layer.

    python bench/scans.py compare [--dpi 200 300] [--engines tesseract rapidocr] [--docs N]
    python bench/scans.py ingest [--dpi 300] [--docs N]

The corpus (built once into --work, default /tmp/ragmux-scans): man pages typeset by groff
(-man, one column, indented), licence texts typeset two-column by groff -ms, and the PDFs
Debian ships under /usr/share/doc (texinfo and DocBook manuals). One page of each: the middle.

`compare` runs each engine on the same rendered pixels, one child process per engine and dpi
(single-threaded, so CPU seconds per page are per core), and reports word recall and precision
against the text layer, pages per CPU second and the child's peak memory. `ingest` sends the
image-only PDFs through the product's parser (the isolated PDF child, which OCRs pages without
text) and scores what it returns the same way. Last line: one JSON object.

Besides the product's own packages the bench needs Debian's `groff` (its PDF device) to typeset
the corpus and, for `compare --engines rapidocr`, `pip install rapidocr-onnxruntime`: neither is
a dependency of ragmux.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from harness import REPO, print_table, report

MAN_PAGES = ("tar ls cp grep sed find ssh bash gzip curl apt git rsync make ps top du df mount chmod date sort").split()
TWO_COLUMN_TEXTS = ("GPL-3", "Apache-2.0", "MPL-2.0")
DEBIAN_PDFS = ("/usr/share/doc/libtasn1-doc/libtasn1.pdf", "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")
WORD = re.compile(r"\w+")


def build_corpus(work: Path, limit: int | None) -> list[Path]:
    """The text PDFs, typeset here when missing (groff with its PDF device: Debian's `groff`)."""
    work.mkdir(parents=True, exist_ok=True)
    pdfs = []
    for name in MAN_PAGES:
        target = work / f"man-{name}.pdf"
        if not target.exists():
            source = subprocess.run(["man", "-w", name], capture_output=True, text=True).stdout.strip()
            if not source:
                continue
            roff = gzip.decompress(Path(source).read_bytes()) if source.endswith(".gz") else Path(source).read_bytes()
            target.write_bytes(_groff(["-man"], roff))
        pdfs.append(target)
    for name in TWO_COLUMN_TEXTS:
        target = work / f"two-column-{name}.pdf"
        if not target.exists():
            target.write_bytes(_groff(["-ms"], _two_column_roff(Path("/usr/share/common-licenses") / name)))
        pdfs.append(target)
    pdfs += [Path(path) for path in DEBIAN_PDFS if Path(path).exists()]
    return pdfs[:limit]


def _groff(macros: list[str], roff: bytes) -> bytes:
    return subprocess.run(["groff", *macros, "-Tpdf"], input=roff, capture_output=True, check=True).stdout


def _two_column_roff(text_file: Path) -> bytes:
    paragraphs = [" ".join(p.split()) for p in text_file.read_text().split("\n\n") if p.strip()]
    body = "".join(f".PP\n{paragraph.replace(chr(92), '')}\n" for paragraph in paragraphs)
    return f".TL\n{text_file.name}\n.2C\n{body}".encode()


def middle_page(pdf: Path) -> tuple[int, str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(str(pdf))
    index = len(document) // 2
    return index, document[index].get_textpage().get_text_range()


def rasterise(pdf: Path, index: int, dpi: int, work: Path) -> Path:
    """The page as an image-only PDF (8-bit grey, as a scanner writes it)."""
    import pypdfium2

    target = work / f"{pdf.stem}-p{index + 1}-{dpi}dpi.pdf"
    if not target.exists():
        page = pypdfium2.PdfDocument(str(pdf))[index]
        image = page.render(scale=dpi / 72, grayscale=True).to_pil()
        image.save(target, "PDF", resolution=dpi)
    return target


def words(text: str) -> Counter:
    return Counter(word.lower() for word in WORD.findall(text))


def score(reference: str, ocr: str) -> tuple[int, int, int]:
    """(words of the reference found, reference words, OCR words): multiset matches."""
    expected, found = words(reference), words(ocr)
    return sum((expected & found).values()), sum(expected.values()), sum(found.values())


def _scan_pixels(scan: Path):
    """The image a scan holds, as the product's child renders it."""
    import pypdfium2

    page = pypdfium2.PdfDocument(str(scan))[0]
    return page.render(scale=_scan_dpi(scan) / 72, grayscale=True).to_pil()


def _scan_dpi(scan: Path) -> int:
    return int(re.search(r"-(\d+)dpi\.pdf$", scan.name).group(1))


def engine_reader(engine: str):
    if engine == "tesseract":

        def read(image) -> str:
            buffer = io.BytesIO()
            image.save(buffer, "PNG")
            # One thread: the figure is per core.
            env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
            command = ["tesseract", "stdin", "stdout", "-l", "eng", "--dpi", str(image.info.get("dpi", (300,))[0])]
            return subprocess.run(
                command, input=buffer.getvalue(), capture_output=True, env=env, check=True
            ).stdout.decode()

        return read
    if engine == "rapidocr":
        import numpy
        from rapidocr_onnxruntime import RapidOCR

        model = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1)

        def read(image) -> str:
            result, _ = model(numpy.asarray(image.convert("RGB")))
            return "\n".join(text for _, text, _ in result or [])

        return read
    raise SystemExit(f"unknown engine {engine}")


def run_engine(engine: str, scans: list[Path]) -> dict:
    """In a child of its own: OCR every scan; CPU seconds include tesseract's own processes."""
    read = engine_reader(engine)
    results = []
    cpu = 0.0
    for scan in scans:
        image = _scan_pixels(scan)
        image.info["dpi"] = (_scan_dpi(scan),)
        before = _cpu_seconds()
        text = read(image)
        cpu += _cpu_seconds() - before
        results.append(text)
    return {"texts": results, "cpu_seconds": cpu}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def compare(args, pages: list[tuple[Path, int, str]]) -> dict:
    rows, result = [], {}
    for dpi in args.dpi:
        scans = [rasterise(pdf, index, dpi, args.work) for pdf, index, _ in pages]
        for engine in args.engines:
            started = time.monotonic()
            child = subprocess.run(
                [sys.executable, __file__, "engine", engine, *map(str, scans)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            wall = time.monotonic() - started
            peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            output = json.loads(child.stdout.splitlines()[-1])
            found = expected = produced = 0
            for (_, _, reference), text in zip(pages, output["texts"], strict=True):
                hit, want, got = score(reference, text)
                found, expected, produced = found + hit, expected + want, produced + got
            figures = {
                "recall": round(found / expected, 4),
                "precision": round(found / max(produced, 1), 4),
                "pages_per_cpu_second": round(len(scans) / output["cpu_seconds"], 3),
                "wall_seconds": round(wall, 1),
                # The largest child so far: each engine runs after the previous ones, so a
                # smaller figure than an earlier row's is hidden (the order is in the JSON).
                "peak_rss_mib_so_far": round(peak_mib),
            }
            result[f"{engine}@{dpi}"] = figures
            rows.append((engine, dpi, len(scans), *figures.values()))
            print(f"{engine}@{dpi}: {json.dumps(figures)}", flush=True)
    print_table(rows, ("engine", "dpi", "pages", "recall", "precision", "pages/cpu-s", "wall s", "peak MiB"))
    return result


def ingest(args, pages: list[tuple[Path, int, str]]) -> dict:
    """The product's path: each scan through parse_document, as the worker calls it."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
    # The settings only load with services named; this bench parses files and connects to none.
    os.environ.setdefault("DATABASE_URL", "postgres://unused@127.0.0.1:1/unused")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-scans-" + "x" * 40)
    os.environ.setdefault("RAGMUX_ENCRYPTION_KEY", base64.urlsafe_b64encode(bytes(32)).decode())
    import django
    from django.conf import settings

    django.setup()
    from ingestion.parsing import OcrOptions, ParseError, parse_document

    # The deployment's limits, as the worker passes them for a store whose OCR is on; but the time
    # per page is the bench's own (--page-timeout): on a machine this busy a page can wait longer
    # for a core than it takes, and the bench measures what OCR reads.
    ocr = OcrOptions(
        language="eng",
        max_pages=settings.OCR_MAX_PAGES,
        page_timeout=args.page_timeout,
        max_pixels=settings.OCR_MAX_PIXELS,
    )

    rows, result = [], {}
    for dpi in args.dpi:
        found = expected = produced = failed = 0
        scans = [rasterise(pdf, index, dpi, args.work) for pdf, index, _ in pages]
        cpu_before, started = _cpu_seconds(), time.monotonic()
        for (_, _, reference), scan in zip(pages, scans, strict=True):
            try:
                parsed = parse_document(filename=scan.name, data=scan.read_bytes(), pdf_timeout=600, ocr=ocr)
                text = "\n".join(block.text for block in parsed.blocks)
            except ParseError as exc:  # counted as a page of no words
                print(f"{scan.name}: {exc}", flush=True)
                failed, text = failed + 1, ""
            hit, want, got = score(reference, text)
            found, expected, produced = found + hit, expected + want, produced + got
        cpu, wall = _cpu_seconds() - cpu_before, time.monotonic() - started
        figures = {
            "recall": round(found / expected, 4),
            "precision": round(found / max(produced, 1), 4),
            "pages_per_cpu_second": round(len(pages) / cpu, 3),
            "wall_seconds": round(wall, 1),
            "peak_child_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
            "failed_pages": failed,
        }
        result[f"ingest@{dpi}"] = figures
        print(f"ingest@{dpi}: {json.dumps(figures)}", flush=True)
        rows.append((dpi, len(pages), *figures.values()))
    print_table(rows, ("dpi", "pages", "recall", "precision", "pages/cpu-s", "wall s", "peak child MiB", "failed"))
    return result


def main() -> None:
    if sys.argv[1:2] == ["engine"]:
        print(json.dumps(run_engine(sys.argv[2], [Path(p) for p in sys.argv[3:]])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("compare", "ingest"))
    parser.add_argument("--dpi", type=int, nargs="+", default=[200, 300])
    parser.add_argument("--engines", nargs="+", default=["tesseract", "rapidocr"])
    parser.add_argument("--docs", type=int, help="only the first N documents")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ragmux-scans"))
    parser.add_argument("--page-timeout", type=float, default=600, help="ingest: OCR_PAGE_TIMEOUT for the bench")
    args = parser.parse_args()
    pdfs = build_corpus(args.work, args.docs)
    pages = [(pdf, *middle_page(pdf)) for pdf in pdfs]
    print(f"{len(pages)} pages of {len(pdfs)} documents: {', '.join(pdf.stem for pdf in pdfs)}")
    result = compare(args, pages) if args.mode == "compare" else ingest(args, pages)
    report({"mode": args.mode, "documents": [pdf.name for pdf in pdfs], **result})


if __name__ == "__main__":
    main()
