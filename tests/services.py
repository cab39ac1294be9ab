"""The services the test suite runs on: its own embedded PostgreSQL (with pgvector) and Redis,
in a scratch folder, on free loopback ports. Nothing on the machine is used or touched."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ragmux.core.crypto import generate_key
from ragmux.launch.embedded import EmbeddedPostgres, EmbeddedRedis, free_port

# Durability buys nothing in a throw-away test cluster.
FAST_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


class TestServices:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ragmux-test-"))
        self.root.chmod(0o755)
        self.postgres = EmbeddedPostgres(self.root, server_options=FAST_OPTIONS)
        self.redis = EmbeddedRedis(self.root)

    def start(self) -> dict[str, str]:
        pg_port = self.postgres.start(free_port())
        redis_port = self.redis.start(free_port())
        return {
            "DATABASE_URL": self.postgres.url(pg_port),
            "REDIS_URL": self.redis.url(redis_port),
            "DJANGO_SECRET_KEY": "test-secret-key-not-for-production",
            "RAGMUX_ENCRYPTION_KEY": generate_key(),
            "RAGMUX_DATA_DIR": str(self.root / "data"),
            # Fake upstreams listen on loopback; the SSRF guard tests take this away again.
            "PRIVATE_UPSTREAM_ALLOWLIST": "127.0.0.1",
            "DJANGO_SETTINGS_MODULE": "ragmux.settings",
        }

    def stop(self) -> None:
        self.redis.stop()
        self.postgres.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def apply(environment: dict[str, str]) -> None:
    os.environ.update(environment)
