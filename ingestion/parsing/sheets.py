"""Spreadsheets: Excel (.xlsx, with openpyxl in read-only mode) and CSV, a section per sheet.

A table's first non-empty row is its header. Every later row is one block that names its columns
("Region: North | Q1: 12"), so a chunk cut anywhere in a long sheet still says what its numbers
are. Rows, columns and cells are bounded; what is left out is said in the document's warnings.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable

from .archives import check_archive
from .text import decode_text, normalise_newlines
from .types import Block, ParsedDocument, ParseError

MAX_ROWS_PER_SHEET = 100_000
MAX_COLUMNS = 256
MAX_CELLS = 2_000_000
MAX_SHEETS = 500
CELL_SEPARATOR = " | "
_CSV_DELIMITERS = ",;\t|"
_CSV_SAMPLE = 8192


class _Budget:
    """The cells left to read in the whole document, and the warnings of what was cut."""

    def __init__(self) -> None:
        self.cells = MAX_CELLS
        self.warnings: list[str] = []


def parse_xlsx(data: bytes) -> ParsedDocument:
    # Imported here, as each office reader is: the package is imported by every PDF child too.
    import openpyxl

    check_archive(data, "xlsx")
    budget = _Budget()
    blocks: list[Block] = []
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            sheets = workbook.worksheets
            if len(sheets) > MAX_SHEETS:
                raise ParseError(f"the xlsx has more than {MAX_SHEETS} sheets (the limit)")
            for sheet in sheets:
                if sheet.sheet_state != "visible":
                    # Hidden sheets hold lookups and scratch work the author chose not to show.
                    budget.warnings.append(f'sheet "{sheet.title}" is hidden and was not read')
                    continue
                rows = sheet.iter_rows(max_col=MAX_COLUMNS, values_only=True)
                blocks += _table_blocks(rows, section=sheet.title, budget=budget)
            title = workbook.properties.title or ""
        finally:
            workbook.close()
    except ParseError:
        raise
    except Exception as exc:  # openpyxl raises anything from KeyError to TypeError on broken files
        raise ParseError(f"the xlsx cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from exc
    return ParsedDocument(blocks=blocks, title=title.strip(), warnings=tuple(budget.warnings))


def parse_csv(data: bytes) -> ParsedDocument:
    text = normalise_newlines(decode_text(data))
    try:
        dialect = csv.Sniffer().sniff(text[:_CSV_SAMPLE], delimiters=_CSV_DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    budget = _Budget()
    try:
        rows = (row[:MAX_COLUMNS] for row in csv.reader(io.StringIO(text), dialect))
        blocks = _table_blocks(rows, section="", budget=budget)
    except csv.Error as exc:
        raise ParseError(f"the CSV cannot be read ({exc})") from exc
    return ParsedDocument(blocks=blocks, title="", warnings=tuple(budget.warnings))


def _table_blocks(rows: Iterable[tuple], *, section: str, budget: _Budget) -> list[Block]:
    blocks = []
    header: list[str] | None = None
    where = f'sheet "{section}"' if section else "the CSV"
    for number, row in enumerate(rows, start=1):
        if number > MAX_ROWS_PER_SHEET:
            budget.warnings.append(f"{where}: only its first {MAX_ROWS_PER_SHEET} rows were read (the limit)")
            break
        budget.cells -= len(row)
        if budget.cells < 0:
            budget.warnings.append(f"{where}: cut at row {number}, past {MAX_CELLS} cells in the document (the limit)")
            break
        cells = [_cell_text(value) for value in row]
        if not any(cells):
            continue
        if header is None:
            header = _header_names(cells)
            continue
        named = (f"{_column_name(header, index)}: {cell}" for index, cell in enumerate(cells) if cell)
        blocks.append(Block(text=CELL_SEPARATOR.join(named), section=section))
    if header is not None and not blocks:
        # A header alone is still the sheet's text.
        blocks.append(Block(text=CELL_SEPARATOR.join(name for name in header if name), section=section))
    return blocks


def _header_names(cells: list[str]) -> list[str]:
    """A header cell merged across columns holds its text in the first column only: the empty
    columns after it take its name, so "Q1 and Q2" names both of the columns it spans."""
    names, previous = [], ""
    for cell in cells:
        previous = cell or previous
        names.append(previous)
    return names


def _column_name(header: list[str], index: int) -> str:
    from openpyxl.utils import get_column_letter

    return (header[index] if index < len(header) else "") or get_column_letter(index + 1)


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, datetime.datetime) and value.time() == datetime.time():
        value = value.date()
    return " ".join(str(value).split())
