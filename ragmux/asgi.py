import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
# The web process pools its database connections: every blocking step of a request runs in a
# thread of its own whose connection is closed at the step's end, and opening a PostgreSQL
# connection (authentication included) costs milliseconds. Only here: a Celery worker forks
# after its start-up checks, and a pool opened before a fork cannot be shared by the children.
settings.DATABASES["default"]["OPTIONS"]["pool"] = {"min_size": 2, "max_size": settings.WEB_DB_POOL_SIZE}
application = get_asgi_application()

from ragmux.startup import run_startup_checks  # noqa: E402  (needs the app registry)

run_startup_checks()
