from django.apps import AppConfig


class McptasksConfig(AppConfig):
    name = "mcptasks"
    verbose_name = "MCP tasks"
    default_auto_field = "django.db.models.BigAutoField"
