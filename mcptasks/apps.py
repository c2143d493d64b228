from django.apps import AppConfig


class McptasksConfig(AppConfig):
    name = "mcptasks"
    verbose_name = "MCP tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from mcptasks import (
            checks,  # noqa: F401 - registers the deploy checks
            dispatch,
            events,
        )
        from mcptasks.celery import app  # noqa: F401 - the app @shared_task binds to
        from mcptasks.dbroles import on_post_migrate
        from mcptasks.outbox import writer  # noqa: F401 - its audit streams listen to the sealer

        # Once per migrate (all apps are migrated by then): the app role's grants.
        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="mcptasks.dbroles")
        # Jobs scheduled by lifecycle, the sweeps and the outbox go to the worker or Celery.
        events.register_dispatcher(dispatch.deliver)
