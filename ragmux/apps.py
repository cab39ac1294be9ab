from django.apps import AppConfig


class RagmuxConfig(AppConfig):
    name = "ragmux"
    verbose_name = "ragmux"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from ragmux.roles import ensure_role_groups
        from ragmux.startup import ensure_key_check

        post_migrate.connect(ensure_role_groups, sender=self)
        post_migrate.connect(ensure_key_check, sender=self)

        from ragmux.metrics import register_collector

        register_collector()
