"""A page of a dashboard list, cut by the API's one paging rule (`ragmux.core.paging`), and the
links to its neighbours with the list's filters kept."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Page

from ragmux.core.paging import offset_page


@dataclass(frozen=True)
class Pager:
    page: Page
    # The list's own address, without a query, and the filters every link keeps.
    address: str
    filters: dict[str, str]

    @property
    def rows(self) -> list:
        return list(self.page.object_list)

    @property
    def number(self) -> int:
        return self.page.number

    @property
    def pages(self) -> int:
        return self.page.paginator.num_pages

    @property
    def total(self) -> int:
        return self.page.paginator.count

    def query(self, number: int) -> str:
        """The query string of page ``number``, empty filters and the first page's number left out."""
        return list_query(self.filters, number)

    @property
    def previous(self) -> str:
        return self.address + self.query(self.number - 1) if self.page.has_previous() else ""

    @property
    def next(self) -> str:
        return self.address + self.query(self.number + 1) if self.page.has_next() else ""


def list_query(filters: Mapping[str, str], number: int) -> str:
    """A list's query string: its filters and page ``number``, the empty ones left out."""
    params = {**filters, "page": number if number > 1 else ""}
    found = urlencode({name: value for name, value in params.items() if value})
    return f"?{found}" if found else ""


def pager(rows, query: Mapping, *, address: str, filters: dict[str, str], total: int | None = None) -> Pager:
    """The page of ``rows`` a `PageQuery`'s validated data asks for (past the last, the last)."""
    return Pager(offset_page(rows, query, total=total), address, filters)
