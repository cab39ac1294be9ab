"""Admin API for model connections, prices and routes: reads for every role, writes for admins."""

from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import APIView

from gateway.connections import price_services, probes, route_services, selectors, services
from gateway.connections.serializers import (
    ConnectionInput,
    ConnectionOutput,
    ConnectionTestInput,
    ConnectionTestOutput,
    ConnectionTrialInput,
    PriceCreateInput,
    PriceListQuery,
    PriceOutput,
    PriceValuesInput,
    ProviderTypeOutput,
    RouteInput,
    RouteOutput,
)
from ragmux.core.roles import AdminWrites, IsViewer
from ragmux.core.serializers import refuse_body


class ProviderTypesApi(APIView):
    """What the connection form offers: every provider type and what it can do. It has no
    writes, so any role asking for one is told 405, not 403."""

    permission_classes = [IsViewer]

    def get(self, request):
        return Response(ProviderTypeOutput(selectors.provider_type_list(), many=True).data)


class ConnectionsApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        return Response(ConnectionOutput(selectors.connection_list(), many=True).data)

    def post(self, request):
        data = ConnectionInput(data=request.data)
        data.is_valid(raise_exception=True)
        connection = services.connection_create(**data.validated_data, actor=request.user)
        return Response(ConnectionOutput(connection).data, status=201)


class ConnectionApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, connection_id: int):
        return Response(ConnectionOutput(selectors.connection_get(connection_id)).data)

    def put(self, request, connection_id: int):
        connection = selectors.connection_get(connection_id)
        data = ConnectionInput(data=request.data)
        data.is_valid(raise_exception=True)
        connection = services.connection_update(connection=connection, **data.validated_data, actor=request.user)
        return Response(ConnectionOutput(connection).data)

    def delete(self, request, connection_id: int):
        refuse_body(request)
        services.connection_delete(connection=selectors.connection_get(connection_id), actor=request.user)
        return Response({"ok": True})


class ConnectionTestApi(APIView):
    permission_classes = [AdminWrites]

    def post(self, request, connection_id: int):
        connection = selectors.connection_get(connection_id)
        data = ConnectionTestInput(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = probes.connection_test(connection=connection, actor=request.user, **data.validated_data)
        return Response(ConnectionTestOutput(outcome).data)


class ConnectionTrialApi(APIView):
    """Tests a connection that is not saved (the form's "Test before saving"): nothing is stored,
    and the key is never sent back."""

    permission_classes = [AdminWrites]

    def post(self, request):
        data = ConnectionTrialInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(ConnectionTestOutput(probes.connection_trial(**data.validated_data)).data)


class PricesApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        query = PriceListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        prices = selectors.price_list(provider_type=query.validated_data.get("provider_type"))
        return Response(PriceOutput(prices, many=True).data)

    def post(self, request):
        data = PriceCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            PriceOutput(price_services.price_create(**data.validated_data, actor=request.user)).data, status=201
        )


class PriceApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, price_id: int):
        return Response(PriceOutput(selectors.price_get(price_id)).data)

    def put(self, request, price_id: int):
        price = selectors.price_get(price_id)
        data = PriceValuesInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            PriceOutput(price_services.price_update(price=price, **data.validated_data, actor=request.user)).data
        )

    def delete(self, request, price_id: int):
        refuse_body(request)
        restored = price_services.price_delete(price=selectors.price_get(price_id), actor=request.user)
        return Response({"ok": True, "restored": PriceOutput(restored).data if restored else None})


class RoutesApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request):
        return Response(RouteOutput(selectors.route_list(), many=True).data)

    def post(self, request):
        data = RouteInput(data=request.data)
        data.is_valid(raise_exception=True)
        route = route_services.route_create(**data.validated_data, actor=request.user)
        return Response(RouteOutput(selectors.route_get(route_id=route.pk)).data, status=201)


class RouteApi(APIView):
    permission_classes = [AdminWrites]

    def get(self, request, route_id: int):
        return Response(RouteOutput(selectors.route_get(route_id=route_id)).data)

    def put(self, request, route_id: int):
        route = selectors.route_get(route_id=route_id)
        data = RouteInput(data=request.data)
        data.is_valid(raise_exception=True)
        route = route_services.route_update(route=route, **data.validated_data, actor=request.user)
        return Response(RouteOutput(selectors.route_get(route_id=route.pk)).data)

    def delete(self, request, route_id: int):
        refuse_body(request)
        route_services.route_delete(route=selectors.route_get(route_id=route_id), actor=request.user)
        return Response({"ok": True})
