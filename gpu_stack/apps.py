from django.apps import AppConfig


class GpuStackConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "gpu_stack"
    verbose_name = "GPU stack"
