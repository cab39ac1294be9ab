from django.apps import AppConfig


class StoresConfig(AppConfig):
    name = "stores"

    def ready(self) -> None:
        from prometheus_client import REGISTRY

        from stores.metrics import DatabaseGaugesCollector

        REGISTRY.register(DatabaseGaugesCollector())
