"""Offset pages of a list, the one way the admin API and the dashboard page documents and the
audit trail: a page number from 1 and a page size (asked for through
`ragmux.core.serializers.PageQuery`), cut by Django's `Paginator`. A number past the last page
answers the last page (an empty list is one empty page), so a link kept while rows went away
still shows rows.

The request log pages by id instead (`gateway.clients.selectors.request_log_page`): rows are
written while a client pages it, and an offset would shift under them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from django.core.paginator import Page, Paginator

PAGE_SIZE = 50
# The query fields that choose the page, not the rows.
PAGE_FIELDS = ("page", "page_size")
# What a page shows when its query was refused.
FIRST_PAGE: Mapping[str, int] = MappingProxyType({"page": 1, "page_size": PAGE_SIZE})


def offset_page(rows, query: Mapping, *, total: int | None = None) -> Page:
    """The page of ``rows`` (ordered) that ``query``, a `PageQuery`'s validated data, asks for;
    past the last page, the last page. ``total`` is the number of rows when the caller has
    counted them already: it saves the count query."""
    paginator = Paginator(rows, query["page_size"])
    if total is not None:
        paginator.count = total
    return paginator.get_page(query["page"])


def without_page(query: dict) -> dict:
    """A `PageQuery`'s validated data without the page: the filters alone."""
    return {name: value for name, value in query.items() if name not in PAGE_FIELDS}


def page_fields(page: Page) -> dict[str, int]:
    """Where a page of an offset-paged API list stands: sent beside the page's items."""
    return {"total": page.paginator.count, "page": page.number, "pages": page.paginator.num_pages}
