from django.apps import AppConfig


class ClusterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "cluster"
    verbose_name = "GPU catalog"
