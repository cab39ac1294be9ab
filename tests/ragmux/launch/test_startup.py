"""Start-up refusals, exercised as an operator meets them: the `ragmux` command in a subprocess."""

import pytest

from ragmux.core.crypto import generate_key
from tests.helpers import run_ragmux


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("MAX_PENDING_DOCUMENTS", "abc", "config: MAX_PENDING_DOCUMENTS: 'abc' is not a whole number"),
        ("INGEST_LEASE", "soon", "config: INGEST_LEASE: 'soon' is not a duration"),
        ("ALLOW_PRIVATE_UPSTREAMS", "perhaps", "config: ALLOW_PRIVATE_UPSTREAMS: 'perhaps' is not a boolean"),
        ("RAGMUX_ENCRYPTION_KEY", "c2hvcnQ", "config: RAGMUX_ENCRYPTION_KEY: decodes to 5 bytes, expected 32"),
        ("DEFAULT_INDEX_CONFIG", "eng-lish", "config: DEFAULT_INDEX_CONFIG: 'eng-lish' is not a name"),
        ("RERANK_TIMEOUT", "quickly", "config: RERANK_TIMEOUT: 'quickly' is not a duration"),
        ("RERANK_MAX_TOKENS", "0", "config: RERANK_MAX_TOKENS: 0 is below the minimum of 1"),
        ("IMAGE_FETCH_TIMEOUT", "0", "config: IMAGE_FETCH_TIMEOUT: 0 is shorter than the minimum of 0.001s"),
        ("IMAGE_FETCH_MAX_CONCURRENT", "0", "config: IMAGE_FETCH_MAX_CONCURRENT: 0 is below the minimum of 1"),
        (
            "IMAGE_CACHE_MAX_MB",
            "10",
            "config: IMAGE_CACHE_MAX_MB: 10 MiB cannot hold one image of IMAGE_FETCH_MAX_MB (11 MiB in base64)",
        ),
        ("STREAM_MAX_DURATION", "forever", "config: STREAM_MAX_DURATION: 'forever' is not a duration"),
        ("UPSTREAM_IDLE_TIMEOUT", "0s", "config: UPSTREAM_IDLE_TIMEOUT: 0s is shorter than the minimum of 0.1s"),
        ("STREAM_MAX_BYTES_MB", "0", "config: STREAM_MAX_BYTES_MB: 0 is below the minimum of 1"),
        # libpq counts whole seconds and waits at least 2.
        ("DATABASE_CONNECT_TIMEOUT", "1", "config: DATABASE_CONNECT_TIMEOUT: 1 is below the minimum of 2"),
        ("LOG_FORMAT", "xml", "config: LOG_FORMAT: 'xml' is not one of text, json"),
        ("TRUSTED_PROXY_CIDRS", "10.0.0.0/8,lb", "config: TRUSTED_PROXY_CIDRS: 'lb' is not a network in CIDR notation"),
        # The networks name the proxies whose headers are believed: without the headers, nothing.
        ("TRUSTED_PROXY_CIDRS", "10.0.0.0/8", "config: TRUSTED_PROXY_CIDRS: set only with TRUST_PROXY_HEADERS=true"),
    ],
)
def test_a_malformed_setting_stops_start_up_naming_the_variable(subprocess_env, variable, value, reason):
    env = {**subprocess_env, variable: value}
    result = run_ragmux(env, "migrate")
    assert result.returncode == 2
    assert reason in result.stderr
    assert "Traceback" not in result.stderr


def test_secrets_are_required_when_database_url_is_set(subprocess_env):
    env = {k: v for k, v in subprocess_env.items() if k != "RAGMUX_ENCRYPTION_KEY"}
    result = run_ragmux(env, "migrate")
    assert result.returncode == 2
    assert "config: RAGMUX_ENCRYPTION_KEY: required when DATABASE_URL is set" in result.stderr


def test_the_wrong_encryption_key_is_refused_with_a_clear_message(subprocess_env):
    result = run_ragmux({**subprocess_env, "RAGMUX_ENCRYPTION_KEY": generate_key()}, "migrate")
    assert result.returncode != 0
    assert "startup refused: RAGMUX_ENCRYPTION_KEY is not the key" in result.stderr


def test_the_right_key_starts(subprocess_env):
    result = run_ragmux(subprocess_env, "migrate")
    assert result.returncode == 0, result.stderr


def test_a_default_index_language_the_database_lacks_is_refused(subprocess_env):
    result = run_ragmux({**subprocess_env, "DEFAULT_INDEX_CONFIG": "Klingon"}, "migrate")
    assert result.returncode != 0
    assert "startup refused: DEFAULT_INDEX_CONFIG 'klingon' is not a text search configuration" in result.stderr
    assert "Traceback" not in result.stderr
    assert run_ragmux({**subprocess_env, "DEFAULT_INDEX_CONFIG": "German"}, "migrate").returncode == 0


def test_the_embedded_default_allows_loopback_upstreams_and_an_external_database_does_not(tmp_path):
    from ragmux.launch.embedded import EmbeddedServices

    embedded: dict[str, str] = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    EmbeddedServices.plan(embedded, tmp_path)
    assert embedded["ALLOW_LOOPBACK_UPSTREAMS"] == "true"

    told = {"REDIS_URL": "redis://127.0.0.1:1/0", "ALLOW_LOOPBACK_UPSTREAMS": "false"}
    EmbeddedServices.plan(told, tmp_path)
    assert told["ALLOW_LOOPBACK_UPSTREAMS"] == "false"

    compose = {"DATABASE_URL": "postgres://db/ragmux", "REDIS_URL": "redis://redis:6379/0"}
    EmbeddedServices.plan(compose, tmp_path)
    assert "ALLOW_LOOPBACK_UPSTREAMS" not in compose
