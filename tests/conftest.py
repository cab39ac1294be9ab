from __future__ import annotations

import os

import pytest

from tests.services import TestServices

_services: TestServices | None = None


def _hands_tests_to_workers(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller (`make test` runs two workers): it runs
    no test, and each worker starts services of its own."""
    distributed = (config.getoption("numprocesses", default=None) or 0) > 0
    return distributed and not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Starts the suite's own PostgreSQL and Redis before Django reads its settings: one pair per
    process that runs tests, so parallel workers share no database, broker or cache."""
    global _services
    if config.getoption("help") or config.getoption("version"):
        return
    if _hands_tests_to_workers(config):
        # Importing ragmux (its Celery app) set this; a worker inheriting it would have
        # pytest-django read the settings before this hook gave that worker its database.
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)
        return
    _services = TestServices()
    os.environ.update(_services.start())
    import django

    django.setup()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _services is not None:
        _services.stop()


pytest_plugins = ["tests.fixtures"]
