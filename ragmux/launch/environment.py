"""What every `ragmux` subcommand runs in: the embedded services planned and started, Django set
up, and the checks made before anything starts.

With ``DATABASE_URL`` / ``REDIS_URL`` unset it plans the embedded services (and their secrets)
under the data folder, validates the settings before anything is started, then starts what is
missing and stops it again on exit.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from contextlib import contextmanager

from ragmux.launch.processes import data_dir


@contextmanager
def environment(*, start_services: bool = True):
    """Plans and starts the embedded services, sets up Django, and stops what it started."""
    from ragmux.launch.embedded import EmbeddedError, EmbeddedServices

    folder = data_dir()
    os.environ.setdefault("RAGMUX_DATA_DIR", str(folder))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
    services = EmbeddedServices.plan(os.environ, folder)

    import django

    django.setup()  # validates every setting; a malformed one exits with "config: ..."
    try:
        if start_services:
            services.start(os.environ)
    except EmbeddedError as exc:
        services.stop()
        sys.stderr.write(f"ragmux: {exc}\n")
        raise SystemExit(1) from None
    try:
        yield services
    finally:
        from django.db import connections

        connections.close_all()
        services.stop()


def migrate(verbosity: int = 0) -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=verbosity)


def refuse_a_bad_start() -> None:
    """The start-up refusals, said by the command before any process starts."""
    from ragmux.core.encryption_key_check import check_encryption_key
    from ragmux.launch.checks import check_default_index_config

    check_encryption_key()
    check_default_index_config()


def ragmux_version() -> str:
    return importlib.metadata.version("ragmux")
