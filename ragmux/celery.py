import os

from celery import Celery
from celery.signals import before_task_publish, task_postrun, task_prerun, worker_init

from ragmux.core import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")

app = Celery("ragmux")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_wrong_encryption_key(**_):
    from ragmux.launch.checks import run_startup_checks

    run_startup_checks()


# A task sent while a request is served carries the request's id, and the worker's lines while
# it runs carry it too (ragmux.core.logs); a task the scheduler sends carries none.
@before_task_publish.connect
def _send_the_request_id(headers=None, **_):
    request_id = logs.current_request_id()
    if request_id is not None and headers is not None:
        headers[logs.TASK_HEADER] = request_id


def _sent_with_request_id(task) -> str | None:
    return getattr(task.request, logs.TASK_HEADER, None) if task is not None else None


@task_prerun.connect
def _log_with_the_request_id(task=None, **_):
    if (request_id := _sent_with_request_id(task)) is not None:
        logs.begin(request_id)


@task_postrun.connect
def _forget_the_request_id(task=None, **_):
    # Only what the task began: a task run eagerly, inside the request, keeps the request's id.
    if _sent_with_request_id(task) is not None:
        logs.end()
