"""The dashboard's pages for model connections and prices: every role reads them, admins change
them through the services the JSON API uses, validated by the API's own inputs. An API key is
never sent back to the browser: the forms show its masked hint and keep it when left empty."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from urllib.parse import urlsplit

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from gateway.connections import price_services, probes, selectors, services
from gateway.connections.guard import UpstreamBlocked
from gateway.connections.models import RATE_FIELDS, ModelPrice, PriceSource, ProviderType
from gateway.connections.prices import builtin_values
from gateway.connections.pricing import rerank_cost
from gateway.connections.serializers import ConnectionInput, PriceCreateInput, PriceValuesInput
from ragmux.core.errors import status_for
from ragmux.dashboard.access import page
from ragmux.dashboard.filters import dollars
from ragmux.dashboard.forms import Form, attempt

CONNECTION_FIELDS = ("name", "provider_type", "base_url", "model_name", "dimensions", "api_version", "api_key")
PRICE_VALUES = RATE_FIELDS
# The rates a price row may leave empty (the input rate applies, or no rerank price).
OPTIONAL_PRICES = tuple(name for name in RATE_FIELDS if ModelPrice._meta.get_field(name).null)
# The request every price row is previewed with.
PREVIEW_INPUT_TOKENS = 1000
PREVIEW_OUTPUT_TOKENS = 500


def _connection_input(form: Form) -> dict:
    data = {name: str(form.values.get(name) or "").strip() for name in CONNECTION_FIELDS}
    data["dimensions"] = data["dimensions"] or None
    return data


def _connection_form_page(request, form: Form, *, connection=None):
    blocked = form.refusal is not None and form.refusal.code == UpstreamBlocked.code
    return render(
        request,
        "dashboard/connection_form.html",
        {
            "form": form,
            "connection": connection,
            # What each type takes and offers: the form shows only the fields that apply.
            "provider_types": selectors.provider_type_list(),
            # The SSRF guard refused the host: the page says which setting would allow it.
            "blocked_host": urlsplit(str(form.values.get("base_url") or "")).hostname if blocked else None,
        },
        status=400 if form.errors else 200,
    )


@page("viewer")
def connections(request):
    rows = list(selectors.connection_list())
    refusals = selectors.private_upstream_refusals(rows)
    for row in rows:
        row.guard_refusal = refusals.get(row.pk)
    return render(request, "dashboard/connections.html", {"connections": rows})


@page("admin", methods=("GET", "POST"))
def connection_create(request):
    form = Form(
        request,
        names=CONNECTION_FIELDS,
        initial={"provider_type": ProviderType.OPENAI},
    )
    if request.method == "POST":
        if form.submit(
            ConnectionInput, _connection_input(form), partial(services.connection_create, actor=request.user)
        ):
            messages.success(request, f"Created the connection “{form.result.name}”. Test it to check it answers.")
            return redirect("dashboard:connections")
        form.values["api_key"] = ""  # what was typed as the key is not echoed back into the page
        messages.error(request, "The connection was not created: see the messages beside the fields.")
    return _connection_form_page(request, form)


@page("admin", methods=("GET", "POST"))
def connection_edit(request, connection_id: int):
    connection = selectors.connection_get(connection_id)
    saved = {name: getattr(connection, name) for name in CONNECTION_FIELDS if name != "api_key"}
    form = Form(request, names=CONNECTION_FIELDS, initial=saved)
    if request.method == "POST":
        save = partial(services.connection_update, connection=connection, actor=request.user)
        if form.submit(ConnectionInput, _connection_input(form), save):
            messages.success(request, f"Saved the connection “{form.result.name}”.")
            return redirect("dashboard:connections")
        form.values["api_key"] = ""  # what was typed as the key is not echoed back into the page
        messages.error(request, "The connection was not saved: see the messages beside the fields.")
    return _connection_form_page(request, form, connection=connection)


@page("admin", methods=("GET", "POST"))
def connection_delete(request, connection_id: int):
    connection = selectors.connection_get(connection_id)
    if request.method == "POST":
        refusal = attempt(lambda: services.connection_delete(connection=connection, actor=request.user)).refusal
        if refusal is not None:
            messages.error(request, f"The connection “{connection.name}” was not deleted: {refusal.message}.")
            return render(
                request,
                "dashboard/connection_delete.html",
                {"connection": connection, "refusal": refusal, "blockers": selectors.connection_blockers(connection)},
                status=status_for(refusal),
            )
        messages.success(request, f"Deleted the connection “{connection.name}”.")
        return redirect("dashboard:connections")
    return render(
        request,
        "dashboard/connection_delete.html",
        {"connection": connection, "blockers": selectors.connection_blockers(connection)},
    )


@page("admin", methods=("POST",), shown_on=lambda connection_id: reverse("dashboard:connections"))
def connection_test(request, connection_id: int):
    connection = selectors.connection_get(connection_id)
    tested = attempt(lambda: probes.connection_test(connection=connection, actor=request.user))
    if tested.refusal is not None:
        messages.error(request, f"“{connection.name}” was not tested: {tested.refusal.message}")
    else:
        outcome = tested.result
        said = messages.success if outcome["ok"] else messages.error
        said(request, f"“{connection.name}” {'works' if outcome['ok'] else 'failed'}. {outcome['summary']}")
    return redirect("dashboard:connections")


# --- prices -----------------------------------------------------------------------------------


def figure(value: Decimal | None) -> str:
    """A price as typed: 2.5, not 2.500000 (nor 1E+1 for ten)."""
    return "" if value is None else format(value.normalize(), "f")


@dataclass
class PriceRow:
    price: ModelPrice

    @property
    def overrides_builtin(self) -> bool:
        return self.price.source == PriceSource.USER and self.builtin is not None

    @property
    def builtin(self) -> dict | None:
        return builtin_values(self.price.provider_type, self.price.model)

    @property
    def origin(self) -> str:
        if self.price.source == PriceSource.BUILTIN:
            return "built-in"
        return "yours, overrides the built-in price" if self.overrides_builtin else "yours"

    @property
    def figures(self) -> dict[str, str]:
        return {name: figure(getattr(self.price, name)) for name in PRICE_VALUES}

    @property
    def preview(self) -> str:
        """What one request costs: one search unit for a row billed per search (a rerank API),
        else the preview's tokens."""
        cost = rerank_cost(
            self.price, search_units=1, prompt_tokens=PREVIEW_INPUT_TOKENS, completion_tokens=PREVIEW_OUTPUT_TOKENS
        )
        return dollars(cost.micros)

    @property
    def per_search(self) -> bool:
        return self.price.per_search_unit is not None


def _price_values_input(form: Form) -> dict:
    data = {name: str(form.values.get(name) or "").strip() for name in PRICE_VALUES}
    for optional in OPTIONAL_PRICES:
        data[optional] = data[optional] or None
    return data


def _prices_page(request, create_form: Form, *, status: int = 200):
    rows = [PriceRow(price) for price in selectors.price_list()]
    return render(
        request,
        "dashboard/prices.html",
        {
            "rows": rows,
            "form": create_form,
            "provider_types": ProviderType.values,
            "preview_input": PREVIEW_INPUT_TOKENS,
            "preview_output": PREVIEW_OUTPUT_TOKENS,
        },
        status=status,
    )


PRICE_CREATE_FIELDS = ("provider_type", "model", *PRICE_VALUES)


@page("viewer")
def prices(request):
    return _prices_page(request, Form(names=PRICE_CREATE_FIELDS, initial={"provider_type": ProviderType.OPENAI}))


@page("admin", methods=("POST",), shown_on=lambda: reverse("dashboard:prices"))
def price_create(request):
    form = Form(request, names=PRICE_CREATE_FIELDS)
    data = {**_price_values_input(form), "provider_type": form.values["provider_type"], "model": form.values["model"]}
    if form.submit(PriceCreateInput, data, partial(price_services.price_create, actor=request.user), field="model"):
        price = form.result
        messages.success(request, f"Added the price of {price.provider_type} {price.model}.")
        return redirect("dashboard:prices")
    messages.error(request, "The price was not added: see the messages beside the fields.")
    return _prices_page(request, form, status=400)


@page("admin", methods=("GET", "POST"))
def price_edit(request, price_id: int):
    """Edits one price. "Preview" shows what the typed values would charge without saving them."""
    price = selectors.price_get(price_id)
    form = Form(
        request,
        names=PRICE_VALUES,
        checkboxes=("preview",),
        initial=PriceRow(price).figures,
    )
    preview = PriceRow(price)
    status = 200
    if request.method == "POST":
        data = form.validated(PriceValuesInput, _price_values_input(form))
        if data is None:
            messages.error(request, "The price was not saved: see the messages beside the fields.")
            status = 400
        elif form.values["preview"]:
            preview = PriceRow(ModelPrice(provider_type=price.provider_type, model=price.model, **data))
        else:
            price = price_services.price_update(price=price, **data, actor=request.user)
            messages.success(
                request,
                f"Saved the price of {price.provider_type} {price.model}: "
                f"one request now costs {PriceRow(price).preview}.",
            )
            return redirect("dashboard:prices")
    return render(
        request,
        "dashboard/price_form.html",
        {
            "price": price,
            "row": PriceRow(price),
            "preview": preview,
            "form": form,
            "preview_input": PREVIEW_INPUT_TOKENS,
            "preview_output": PREVIEW_OUTPUT_TOKENS,
        },
        status=status,
    )


@page("admin", methods=("POST",), shown_on=lambda price_id: reverse("dashboard:prices"))
def price_delete(request, price_id: int):
    price = selectors.price_get(price_id)
    deleted = attempt(lambda: price_services.price_delete(price=price, actor=request.user))
    if deleted.refusal is not None:
        messages.error(request, f"{price.provider_type} {price.model}: {deleted.refusal.message}")
    else:
        done = "Restored the built-in price of" if deleted.result else "Deleted the price of"
        messages.success(request, f"{done} {price.provider_type} {price.model}.")
    return redirect("dashboard:prices")
