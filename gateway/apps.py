from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from gateway.prices import upsert_builtin_prices

        post_migrate.connect(upsert_builtin_prices, sender=self)
