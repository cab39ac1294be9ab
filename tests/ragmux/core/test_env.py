import pytest

from ragmux.core.env import (
    ConfigError,
    env_address,
    env_bool,
    env_duration,
    env_host_allowlist,
    env_identifier,
    env_int,
    env_networks,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h", 3600), ("250ms", 0.25), (" 2m ", 120)]
)
def test_durations_accept_plain_seconds_and_units(text, seconds):
    assert parse_duration(text) == seconds


def test_malformed_duration_names_the_variable():
    with pytest.raises(ConfigError, match="INGEST_LEASE: 'soon' is not a duration"):
        env_duration("INGEST_LEASE", 120, environ={"INGEST_LEASE": "soon"})


def test_duration_below_minimum_is_refused():
    with pytest.raises(ConfigError, match="INGEST_LEASE: 1s is shorter than the minimum of 3s"):
        env_duration("INGEST_LEASE", 120, minimum=3, environ={"INGEST_LEASE": "1s"})


def test_unset_and_blank_values_take_the_default():
    assert env_int("MAX_PENDING_DOCUMENTS", 1024, environ={}) == 1024
    assert env_int("MAX_PENDING_DOCUMENTS", 1024, environ={"MAX_PENDING_DOCUMENTS": "  "}) == 1024


def test_malformed_integer_names_the_variable():
    with pytest.raises(ConfigError, match="MAX_PENDING_DOCUMENTS: 'abc' is not a whole number"):
        env_int("MAX_PENDING_DOCUMENTS", 1024, environ={"MAX_PENDING_DOCUMENTS": "abc"})


def test_integer_range_is_enforced():
    with pytest.raises(ConfigError, match="INGEST_WORKERS: 0 is below the minimum of 1"):
        env_int("INGEST_WORKERS", 2, minimum=1, environ={"INGEST_WORKERS": "0"})


def test_booleans_are_strict():
    assert env_bool("ALLOW_PRIVATE_UPSTREAMS", False, environ={"ALLOW_PRIVATE_UPSTREAMS": "TRUE"}) is True
    with pytest.raises(ConfigError, match="ALLOW_PRIVATE_UPSTREAMS: 'maybe' is not a boolean"):
        env_bool("ALLOW_PRIVATE_UPSTREAMS", False, environ={"ALLOW_PRIVATE_UPSTREAMS": "maybe"})


def test_allowlist_keeps_hosts_and_refuses_bad_cidrs():
    value = {"PRIVATE_UPSTREAM_ALLOWLIST": "Ollama, 10.0.0.0/8 ,127.0.0.1"}
    assert env_host_allowlist("PRIVATE_UPSTREAM_ALLOWLIST", environ=value) == ["ollama", "10.0.0.0/8", "127.0.0.1"]
    with pytest.raises(ConfigError, match="PRIVATE_UPSTREAM_ALLOWLIST: '10.0.0.0/99' is not a valid CIDR"):
        env_host_allowlist("PRIVATE_UPSTREAM_ALLOWLIST", environ={"PRIVATE_UPSTREAM_ALLOWLIST": "10.0.0.0/99"})


def test_identifiers_are_lower_cased_and_strict():
    assert env_identifier("DEFAULT_INDEX_CONFIG", "english", environ={"DEFAULT_INDEX_CONFIG": " German "}) == "german"
    assert env_identifier("DEFAULT_INDEX_CONFIG", "english", environ={"DEFAULT_INDEX_CONFIG": ""}) == "english"
    for bad in ("eng-lish", "9lives", "x" * 64, "public.english", "simple;drop"):
        with pytest.raises(ConfigError, match=f"DEFAULT_INDEX_CONFIG: '{bad}' is not a name"):
            env_identifier("DEFAULT_INDEX_CONFIG", "english", environ={"DEFAULT_INDEX_CONFIG": bad})


def test_networks_are_strict_cidrs():
    value = {"TRUSTED_PROXY_CIDRS": "10.0.0.0/8, 192.168.1.5 ,fd00::/8"}
    assert [str(n) for n in env_networks("TRUSTED_PROXY_CIDRS", environ=value)] == [
        "10.0.0.0/8",
        "192.168.1.5/32",
        "fd00::/8",
    ]
    assert env_networks("TRUSTED_PROXY_CIDRS", environ={}) == []
    for bad in ("10.0.0.0/33", "10.0.0.1/8", "proxy.internal", "10.0.0.0/8;rm"):
        with pytest.raises(ConfigError, match=f"TRUSTED_PROXY_CIDRS: '{bad}' is not a network in CIDR notation"):
            env_networks("TRUSTED_PROXY_CIDRS", environ={"TRUSTED_PROXY_CIDRS": bad})


@pytest.mark.parametrize(
    ("text", "address"),
    [("127.0.0.1:9108", ("127.0.0.1", 9108)), ("[::1]:9108", ("::1", 9108)), ("localhost:1", ("localhost", 1))],
)
def test_listen_addresses_are_host_and_port(text, address):
    assert env_address("METRICS_LISTEN", environ={"METRICS_LISTEN": text}) == address
    assert env_address("METRICS_LISTEN", environ={}) is None


@pytest.mark.parametrize(
    "text", ["9108", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "metrics.example:9108", ":9108"]
)
def test_malformed_listen_addresses_are_refused(text):
    with pytest.raises(ConfigError, match="METRICS_LISTEN: "):
        env_address("METRICS_LISTEN", environ={"METRICS_LISTEN": text})
