from django.apps import AppConfig


class PortalConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "portal"
    verbose_name = "API tokens"

    def ready(self) -> None:
        from portal import signals  # noqa: F401 - connects the audit receivers
