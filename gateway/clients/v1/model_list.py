"""GET /v1/models, GET /v1/models/{id}."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import selectors
from gateway.clients.ledger import Call
from gateway.clients.models import Endpoint, Scope
from gateway.clients.v1.endpoint import v1_endpoint
from ragmux.core.errors import (
    NotFound,
)

# Who a route is "owned by" in its model object: the gateway, which picks the upstream.
ROUTE_OWNER = "ragmux"


def _model_object(name: str, created, owned_by: str) -> dict:
    return {"id": name, "object": "model", "created": int(created.timestamp()), "owned_by": owned_by}


async def _model_objects(call: Call) -> list[dict]:
    """The project's chat and embedding models, then the routes its keys may name (its chat
    route among them); a route named like a model stands for it, as a call naming it goes to
    the route."""
    project = call.project
    objects: dict[str, dict] = {}
    for connection in (project.chat_connection, project.embedding_connection):
        if connection is not None and connection.model_name not in objects:
            objects[connection.model_name] = _model_object(
                connection.model_name, connection.created_at, connection.provider_type
            )
    for route in await selectors.project_route_names(project=project):
        objects[route.name] = _model_object(route.name, route.created_at, ROUTE_OWNER)
    return list(objects.values())


@v1_endpoint(endpoint=Endpoint.MODELS, scope=Scope.MODELS, methods=("GET",))
async def models(request: HttpRequest, call: Call) -> HttpResponse:
    return JsonResponse({"object": "list", "data": await _model_objects(call)})


@v1_endpoint(endpoint=Endpoint.MODELS, scope=Scope.MODELS, methods=("GET",))
async def model(request: HttpRequest, call: Call, model_id: str) -> HttpResponse:
    for item in await _model_objects(call):
        if item["id"] == model_id:
            return JsonResponse(item)
    raise NotFound(f"no model {model_id!r} for this project", code="model_not_found")
