"""The dashboard's store pages: the overview, the stores, a store's documents, uploads and
settings, and the search comparison. As every page of the dashboard, each reads through the
selectors and writes through the services the JSON API uses, validates with the API's own inputs,
and checks the role first (`access.page`). Every form ends with a flash message saying what
happened."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from gateway.connections.models import RouteKind
from gateway.connections.selectors import connection_list, route_list
from ingestion import services as admission
from ingestion.parsing import SUPPORTED_EXTENSIONS
from ingestion.serializers import ReprocessInput, TextDocumentInput
from ingestion.uploads import oversize_upload
from ragmux.core.paging import FIRST_PAGE
from ragmux.dashboard.access import page, wants_fragment
from ragmux.dashboard.compare import (
    CHECKBOX,
    SETTING_OF_INPUT,
    SIDES,
    WEIGHT_INPUTS,
    Configuration,
    RankedHit,
    configuration_choices,
    configuration_from,
    default_configurations,
    query_problem,
    rank_against,
    store_settings_input,
)
from ragmux.dashboard.forms import Form, attempt, json_input
from ragmux.dashboard.lexical_index import lexical_index
from ragmux.dashboard.pager import Pager, list_query, pager
from ragmux.dashboard.quota import store_quota
from ragmux.dashboard.request_logs import overview_usage
from ragmux.dashboard.spend import overview_spend
from ragmux.dashboard.store_form import SEARCH_BACKEND_LINES, StoreForm
from ragmux.dashboard.uploads import summary, upload_attributes, upload_outcomes
from retrieval.rerank import reranked_search
from retrieval.search import SearchResult, matching_words
from retrieval.serializers import MAX_QUERY_CHARS
from stores import selectors, services
from stores.choices import DocumentStatus, SearchMode
from stores.models import RagStore
from stores.serializers import DocumentListQuery, DocumentUpdateInput, StoreSettingsInput

RECENT_FAILURES = 10
# Statuses that change on their own: while a store has documents in them its table polls.
MOVING = (DocumentStatus.PENDING, DocumentStatus.PROCESSING)


def _store_url(store_id: int) -> str:
    return reverse("dashboard:store", args=[store_id])


# --- overview and stores ----------------------------------------------------------------------


@page("viewer")
def overview(request):
    return render(
        request,
        "dashboard/overview.html",
        {
            "stores": list(selectors.store_list()),
            "backlog": selectors.documents_by_status(),
            "failures": list(selectors.recent_failures(limit=RECENT_FAILURES)),
            **overview_usage(),
            "spends": overview_spend(),
        },
    )


@page("viewer")
def stores(request):
    rows = [(store, store_quota(store)) for store in selectors.store_list()]
    return render(request, "dashboard/stores.html", {"rows": rows})


def _store_form_page(request, form: StoreForm, *, status: int = 200):
    store = form.store
    return render(
        request,
        "dashboard/store_form.html",
        {
            "form": form,
            "store": store,
            "lexical": lexical_index(store) if store else None,
            "reprocess_recommended": bool(
                store and store.document_count and request.GET.get("reprocess") == "recommended"
            ),
        },
        status=status,
    )


@page("admin", methods=("GET", "POST"))
def store_create(request):
    form = StoreForm(
        store=None, connections=connection_list(), rerank_routes=route_list(kind=RouteKind.RERANK), request=request
    )
    if request.method == "POST":
        if form.save(partial(services.store_create, actor=request.user)):
            store = form.result
            messages.success(request, f"Created the store “{store.name}”. Upload documents to fill it.")
            return redirect(_store_url(store.pk))
        messages.error(request, "The store was not created: see the messages beside the fields.")
        return _store_form_page(request, form, status=400)
    return _store_form_page(request, form)


@page("admin", methods=("GET", "POST"))
def store_settings(request, store_id: int):
    store = selectors.store_get(store_id)
    form = StoreForm(
        store=store, connections=connection_list(), rerank_routes=route_list(kind=RouteKind.RERANK), request=request
    )
    if request.method == "POST":
        if form.save(partial(services.store_update, store=store, actor=request.user)):
            outcome = form.result
            saved = outcome.store
            rebuild = (
                f" Its lexical index is being rebuilt in {saved.index_config} in the background; searches use "
                "the current index until then."
                if saved.index_config != saved.indexed_config
                else ""
            )
            messages.success(request, f"Saved the settings of “{saved.name}”.{rebuild}")
            url = reverse("dashboard:store-settings", args=[store.pk])
            return redirect(url + ("?reprocess=recommended" if outcome.reprocess_recommended else ""))
        messages.error(request, "The settings were not saved: see the messages beside the fields.")
        return _store_form_page(request, form, status=400)
    return _store_form_page(request, form)


@page("admin", methods=("GET", "POST"))
def store_delete(request, store_id: int):
    store = selectors.store_get(store_id)
    if request.method == "POST":
        if Form(request, names=("confirm_name",)).values["confirm_name"].strip() == store.name:
            services.store_delete(store=store, actor=request.user)
            messages.success(request, f"Deleted the store “{store.name}” and its {store.document_count} documents.")
            return redirect("dashboard:stores")
        messages.error(request, "The store was not deleted: type its name exactly to confirm.")
        return render(request, "dashboard/store_delete.html", {"store": store, "mismatch": True}, status=400)
    return render(request, "dashboard/store_delete.html", {"store": store})


# --- a store's documents ----------------------------------------------------------------------


@dataclass
class DocumentTable:
    store: RagStore
    pager: Pager
    counts: dict[str, int]
    status: str

    @property
    def moving(self) -> bool:
        return any(self.counts.get(status) for status in MOVING)

    @property
    def place(self) -> str:
        """Where the list stands (filter and page), as a query string: each action's form
        carries it, so the action returns there."""
        return self.pager.query(self.pager.number)

    @property
    def url(self) -> str:
        """The table alone, as it is now: what htmx polls."""
        return reverse("dashboard:store-documents", args=[self.store.pk]) + self.pager.query(self.pager.number)

    @property
    def filters(self) -> list[tuple[str, str, int]]:
        """(value, label, count) of each status filter, "all" first."""
        every = [("", "all", sum(self.counts.values()))]
        return every + [(value, value, self.counts.get(value, 0)) for value in DocumentStatus.values]


def _list_place(query) -> Mapping:
    """The validated filter and page of a document list's query; a hand-edited one that is
    refused is the first page of everything."""
    checked = DocumentListQuery(data=query)
    return checked.validated_data if checked.is_valid() else FIRST_PAGE


def _back_to_list(request, store_id: int):
    """The store page at the place in its list the action was sent from (the form's `place`,
    the list's query string). Validated and rebuilt, never echoed: it cannot lead elsewhere."""
    data = _list_place(QueryDict(request.POST.get("place", "").removeprefix("?")))
    return redirect(_store_url(store_id) + list_query({"status": data.get("status", "")}, data["page"]))


def _document_table(request, store: RagStore) -> DocumentTable:
    data = _list_place(request.GET)
    status = data.get("status", "")
    counts = selectors.documents_by_status(store=store)
    documents = selectors.document_list(store=store, status=status or None)
    total = counts.get(status, 0) if status else sum(counts.values())
    table = pager(documents, data, address=_store_url(store.pk), filters={"status": status}, total=total)
    return DocumentTable(store, table, counts, status)


def _store_page(request, store: RagStore, *, text_form: Form | None = None, status: int = 200):
    return render(
        request,
        "dashboard/store.html",
        {
            "store": store,
            "quota": store_quota(store),
            "lexical": lexical_index(store),
            "table": _document_table(request, store),
            "text_form": text_form,
            "accepted_extensions": ",".join(SUPPORTED_EXTENSIONS),
        },
        status=status,
    )


@page("viewer")
def store_detail(request, store_id: int):
    return _store_page(request, selectors.store_get(store_id))


@page("viewer")
def store_documents(request, store_id: int):
    """The document table alone, with the quota card (meters and lexical index state) out of
    band: htmx polls it while documents are queued or processing, and the upload script asks for
    it after each batch."""
    store = selectors.store_get(store_id)
    return render(
        request,
        "dashboard/_documents.html",
        {
            "table": _document_table(request, store),
            "quota": store_quota(store),
            "lexical": lexical_index(store),
            "out_of_band": True,
        },
    )


@page("viewer")
def store_lexical_index(request, store_id: int):
    """The lexical index's state alone: htmx polls it while the index is rebuilt."""
    return render(request, "dashboard/_lexical_index.html", {"lexical": lexical_index(selectors.store_get(store_id))})


def _store_address(store_id: int) -> str:
    return reverse("dashboard:store", args=[store_id])


def _document_store_address(document_id: int) -> str:
    return _store_address(selectors.document_get(document_id).store_id)


@page("editor", methods=("POST",), shown_on=_store_address)
def store_upload(request, store_id: int):
    store = selectors.store_get(store_id)
    uploads = request.FILES.getlist("files")
    names = [admission.sanitise_filename(upload.name) for upload in uploads]
    if not uploads and getattr(request, "oversize_upload", None) is None:
        messages.error(request, "Nothing was uploaded: choose or drop at least one file.")
        return redirect(_store_url(store.pk))

    def admit() -> admission.UploadResult:
        oversize_upload(request)
        attributes = upload_attributes(request.POST)
        incoming = [
            admission.IncomingFile(filename=name, data=upload.read(), attributes=attributes)
            for name, upload in zip(names, uploads, strict=True)
        ]
        return admission.document_upload(store=store, files=incoming, actor=request.user)

    admitted = attempt(admit)
    result = admitted.result if admitted.refusal is None else admission.UploadResult(refusal=admitted.refusal)
    outcomes = upload_outcomes(names, result)
    if wants_fragment(request):
        return render(request, "dashboard/_upload_results.html", {"outcomes": outcomes})
    level = messages.SUCCESS if all(outcome.accepted for outcome in outcomes) else messages.WARNING
    messages.add_message(request, level, "Upload: " + summary(outcomes))
    for outcome in outcomes:
        if not outcome.accepted:
            messages.add_message(request, level, f"{outcome.filename}: {outcome.verdict} — {outcome.detail}")
    return redirect(_store_url(store.pk))


@page("editor", methods=("POST",), shown_on=_store_address)
def store_text(request, store_id: int):
    store = selectors.store_get(store_id)
    form = Form(request, names=("title", "content", "source", "tags", "attributes"))
    tags = [tag.strip() for tag in form.values["tags"].split(",") if tag.strip()]
    attributes = json_input(form.values["attributes"])
    error = "The text was not added: see the messages beside the fields."
    if form.submit(
        TextDocumentInput,
        {**form.values, "tags": tags, "attributes": {} if attributes is None else attributes},
        partial(admission.document_ingest_text, store=store, actor=request.user),
    ):
        (outcome,) = upload_outcomes([admission.text_document_filename(form.values["title"])], form.result)
        if outcome.accepted:
            messages.success(request, f"{outcome.filename}: accepted, queued for ingestion.")
            return redirect(_store_url(store.pk))
        error = f"{outcome.filename}: {outcome.verdict} — {outcome.detail}"
    elif form.refusal is not None:
        error = form.refusal.message
    messages.error(request, error)
    return _store_page(request, store, text_form=form, status=400)


@page("editor", methods=("POST",), shown_on=_store_address)
def store_reprocess(request, store_id: int):
    store = selectors.store_get(store_id)
    form = Form(request, names=("status",))
    status = form.values["status"]
    if form.submit(
        ReprocessInput,
        {"status": status} if status else {},
        partial(admission.store_reprocess, store=store, actor=request.user),
    ):
        queued, which = form.result, f"{status} " if status else ""
        messages.success(request, f"{queued} {which}document{'s' if queued != 1 else ''} queued for reprocessing.")
    elif form.refusal is not None:
        messages.error(request, form.refusal.message)
    else:
        messages.error(request, f"Nothing was reprocessed: “{status}” is not a document status.")
    return _back_to_list(request, store.pk)


@page("editor", methods=("POST",), shown_on=_document_store_address)
def document_reprocess(request, document_id: int):
    document = selectors.document_get(document_id)
    refusal = attempt(lambda: admission.document_reprocess(document=document, actor=request.user)).refusal
    if refusal is not None:
        messages.error(request, f"{document.filename}: {refusal.message}")
    else:
        messages.success(request, f"{document.filename}: queued for reprocessing.")
    return _back_to_list(request, document.store_id)


@page("editor", methods=("POST",), shown_on=_document_store_address)
def document_delete(request, document_id: int):
    document = selectors.document_get(document_id)
    services.document_delete(document=document, actor=request.user)
    messages.success(request, f"Deleted {document.filename} with its chunks.")
    return _back_to_list(request, document.store_id)


@page("editor", methods=("POST",), shown_on=_document_store_address)
def document_metadata(request, document_id: int):
    """A document's attributes and tags, edited on its row (each replaced whole, as the API's PATCH)."""
    document = selectors.document_get(document_id)
    form = Form(request, names=("attributes", "tags"))
    attributes = json_input(form.values["attributes"])
    data = {
        "attributes": {} if attributes is None else attributes,
        "tags": [tag.strip() for tag in form.values["tags"].split(",") if tag.strip()],
    }
    save = partial(services.document_update, document=document, actor=request.user)
    if form.submit(DocumentUpdateInput, data, lambda **values: save(values=values)):
        messages.success(request, f"{document.filename}: attributes and tags saved.")
    else:
        messages.error(request, f"{document.filename} was not saved: {form.problems}")
    return _back_to_list(request, document.store_id)


# --- search compare ---------------------------------------------------------------------------


@dataclass
class Column:
    configuration: Configuration
    result: SearchResult | None = None
    error: str = ""
    latency_ms: float = 0.0
    hits: list[RankedHit] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.configuration.side.upper()

    @property
    def heading(self) -> str:
        """The column's title: the mode and backend that ran, never merely those asked for."""
        if self.result is None:
            return f"{self.label}: not run"
        return f"{self.label}: {self.result.mode} · {self.result.backend}"

    @property
    def searched_text(self) -> bool:
        """Whether a text search configuration parsed the query: not in a vector-only search."""
        return self.result is not None and self.result.mode != SearchMode.VECTOR

    @property
    def rerank_status(self) -> str:
        """What became of this column's rerank, in words."""
        report = self.result.rerank if self.result is not None else None
        if report is None:
            return "off"
        if report.reranked:
            return f"reranked by {report.backend} in {report.latency_ms} ms"
        if report.fallback:
            reason = report.fallback_reason
            return f"{report.backend} failed after {report.latency_ms} ms ({reason}): the fused order is kept"
        return f"skipped: {report.skipped_reason}"


def _run(store: RagStore, query: str, configuration: Configuration) -> Column:
    column = Column(configuration)
    if configuration.overrides is None:
        column.error = "Fix the settings of this configuration to run it."
        return column
    started = time.monotonic()
    searched = attempt(lambda: reranked_search(store=store, query=query, overrides=configuration.overrides))
    column.result = searched.result
    column.error = searched.refusal.message if searched.refusal is not None else ""
    column.latency_ms = (time.monotonic() - started) * 1000
    return column


@page("viewer")
def search(request):
    stores = list(selectors.store_list())
    chosen = request.GET.get("store", "")
    store = next((s for s in stores if str(s.pk) == chosen), None) if chosen else (stores[0] if stores else None)
    if chosen and store is None:
        raise Http404("store not found")
    query = request.GET.get("q", "").strip()
    query_error = query_problem(query)
    columns: list[Column] = []
    if store is not None and query and query_error:
        columns = [Column(configuration_from(request.GET, side, query)) for side in SIDES]
    elif store is not None and query:
        columns = [_run(store, query, configuration_from(request.GET, side, query)) for side in SIDES]
        a, b = columns
        for column, other in ((a, b), (b, a)):
            if column.result is not None:
                other_hits = other.result.hits if other.result is not None else None
                words = matching_words(query=query, result=column.result)
                column.hits = rank_against(column.result.hits, other_hits, words, mode=column.result.mode)
    elif store is not None:
        columns = [Column(configuration) for configuration in default_configurations(store)]
    return render(
        request,
        "dashboard/search.html",
        {
            "stores": stores,
            "store": store,
            "query": query,
            "query_error": query_error,
            "filters": request.GET.get("filters", ""),
            "max_query_chars": MAX_QUERY_CHARS,
            "columns": columns,
            "compared": bool(query) and not query_error,
            "backend_lines": SEARCH_BACKEND_LINES.items(),
            **configuration_choices(),
        },
    )


@page("admin", methods=("POST",), shown_on=lambda store_id: reverse("dashboard:search") + f"?store={store_id}")
def search_save(request, store_id: int):
    """Saves one compared configuration as the store's search settings."""
    store = selectors.store_get(store_id)
    inputs = (name for name in (*SETTING_OF_INPUT, *WEIGHT_INPUTS) if name != CHECKBOX)
    form = Form(request, names=("side", "next", *inputs), checkboxes=(CHECKBOX,))
    side = form.values["side"].upper()
    save = partial(services.store_update, store=store, name=store.name, actor=request.user)
    if form.submit(
        StoreSettingsInput, store_settings_input(form.values), lambda **values: save(values=values), partial=True
    ):
        messages.success(request, f"Saved configuration {side} as the search settings of “{store.name}”.")
    else:
        messages.error(request, f"Configuration {side} was not saved: {form.problems}")
    back = form.values["next"]
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("dashboard:search") + f"?store={store.pk}"
    return HttpResponseRedirect(back)
