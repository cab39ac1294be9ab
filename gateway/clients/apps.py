from django.apps import AppConfig


class ClientsConfig(AppConfig):
    """The client API: projects, their gateway keys, the request log and `/v1`."""

    name = "gateway.clients"
    label = "clients"
