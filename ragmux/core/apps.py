from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "ragmux.core"
    # The label predates the kernel's move into ragmux/core; tables and migrations keep it.
    label = "ragmux"
    verbose_name = "ragmux"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate
        from django.urls import register_converter

        from ragmux.core.converters import IdConverter

        register_converter(IdConverter, "id")

        from ragmux.core.encryption_key_check import ensure_key_check
        from ragmux.core.roles import ensure_role_groups

        post_migrate.connect(ensure_role_groups, sender=self)
        post_migrate.connect(ensure_key_check, sender=self)
