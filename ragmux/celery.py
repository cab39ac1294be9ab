import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")

app = Celery("ragmux")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_wrong_encryption_key(**_):
    from ragmux.launch.checks import run_startup_checks

    run_startup_checks()
