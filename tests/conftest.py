from __future__ import annotations

import os

import pytest

from tests.services import TestServices

_services: TestServices | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Starts the suite's own PostgreSQL and Redis before Django reads its settings."""
    global _services
    if config.getoption("help") or config.getoption("version"):
        return
    _services = TestServices()
    os.environ.update(_services.start())
    import django

    django.setup()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _services is not None:
        _services.stop()


pytest_plugins = ["tests.fixtures"]
