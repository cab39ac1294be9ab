import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
application = get_asgi_application()

from ragmux.startup import check_encryption_key, log_store_warnings  # noqa: E402  (needs the app registry)

check_encryption_key()
log_store_warnings()
