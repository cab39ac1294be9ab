import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
application = get_asgi_application()

from ragmux.startup import run_startup_checks  # noqa: E402  (needs the app registry)

run_startup_checks()
