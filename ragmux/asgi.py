import os

from django.core.asgi import get_asgi_application

from ragmux.core.allocator import keep_large_blocks_mapped

# Before anything large is allocated: an upload's memory must go back after the request.
keep_large_blocks_mapped()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
application = get_asgi_application()

from ragmux.startup import run_startup_checks  # noqa: E402  (needs the app registry)

run_startup_checks()
