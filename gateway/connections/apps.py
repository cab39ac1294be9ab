from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    name = "gateway.connections"
    # The label predates the move into gateway/connections; tables and migrations keep it.
    label = "gateway"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from gateway.connections.prices import upsert_builtin_prices

        post_migrate.connect(upsert_builtin_prices, sender=self)
