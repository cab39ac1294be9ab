"""The SSRF guard of the one outbound HTTP path, against a real server on 127.0.0.1.

Name resolution is the one thing faked: the system resolver (socket.getaddrinfo) answers for
made-up public-looking names the way a hostile DNS server would.
"""

import asyncio
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx
import pytest

from gateway.connections import connection_failures, guard, http
from ragmux.core.errors import UpstreamFailed, UpstreamTimeout
from tests.fakes.forward_proxy import ForwardProxy

PUBLIC_LOOKING = "api.models-example.com"


def _raised_from(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.fixture
def hostile_dns(monkeypatch):
    """Makes chosen hostnames resolve to chosen addresses, as a DNS server could."""
    answers: dict[str, str] = {}
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port or 0))]
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.mark.parametrize(
    ("address", "private"),
    [
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("172.16.0.9", True),
        ("192.168.1.1", True),
        ("169.254.169.254", True),
        ("100.64.0.1", True),
        ("0.0.0.0", True),
        ("224.0.0.1", True),
        ("::1", True),
        ("fc00::1", True),
        ("fe80::1", True),
        ("::ffff:127.0.0.1", True),
        ("64:ff9b::a00:1", True),
        ("8.8.8.8", False),
        ("2606:4700:4700::1111", False),
    ],
)
def test_private_loopback_link_local_and_metadata_addresses_are_blocked(address, private):
    assert guard.is_private_address(ipaddress.ip_address(address)) is private


def test_loopback_is_refused_unless_allow_listed(settings, fake_upstream):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    with pytest.raises(guard.UpstreamBlocked) as refused:
        http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]})
    assert 'upstream host "127.0.0.1" resolves to a private or local address' in refused.value.message
    assert fake_upstream.calls() == 0


@pytest.mark.parametrize("entry", ["127.0.0.1", "127.0.0.0/8"])
def test_an_allow_listed_address_or_network_may_be_called(settings, fake_upstream, entry):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = [entry]
    response = http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]})
    assert response.status == 200
    assert fake_upstream.calls("openai.embeddings") == 1


def test_allow_private_upstreams_lets_everything_through(settings, fake_upstream):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    settings.ALLOW_PRIVATE_UPSTREAMS = True
    assert http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]}).status == 200


def test_a_public_looking_name_that_resolves_to_loopback_is_refused(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    hostile_dns[PUBLIC_LOOKING] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    with pytest.raises(guard.UpstreamBlocked, match=PUBLIC_LOOKING):
        http.request("POST", f"http://{PUBLIC_LOOKING}:{port}/v1/embeddings", json_body={"input": ["x"]})
    assert fake_upstream.calls() == 0


def test_an_allow_listed_hostname_is_called_at_the_address_that_was_checked(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["ollama.internal"]
    hostile_dns["ollama.internal"] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    response = http.request("POST", f"http://ollama.internal:{port}/api/embed", json_body={"input": ["x"]})
    assert response.status == 200
    # The Host header still names the host, although the connection went to the checked address.
    assert fake_upstream.requests[-1].headers["host"] == f"ollama.internal:{port}"


def test_a_redirect_to_a_private_address_is_refused(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["upstream.internal"]
    hostile_dns["upstream.internal"] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    fake_upstream.configure("openai.embeddings", redirect_to=f"http://127.0.0.1:{port}/api/embed")
    with pytest.raises(guard.UpstreamBlocked, match='upstream host "127.0.0.1"'):
        http.request("POST", f"http://upstream.internal:{port}/v1/embeddings", json_body={"input": ["x"]})
    assert fake_upstream.calls("ollama.embed") == 0


def test_a_same_host_redirect_is_followed(fake_upstream):
    fake_upstream.configure("openai.embeddings", redirect_to=f"{fake_upstream.url}/api/embed")
    response = http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]})
    assert response.status == 200
    assert fake_upstream.calls("ollama.embed") == 1


def test_a_redirect_to_another_host_is_refused(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1", "other.internal"]
    hostile_dns["other.internal"] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    fake_upstream.configure("openai.embeddings", redirect_to=f"http://other.internal:{port}/api/embed")
    with pytest.raises(UpstreamFailed, match="another host"):
        http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]})


def test_responses_over_the_size_cap_are_cut_off(fake_upstream):
    fake_upstream.configure("openai.embeddings", width=4096)
    with pytest.raises(UpstreamFailed, match="larger than") as failure:
        http.request(
            "POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["a"] * 50}, max_bytes=1024 * 1024
        )
    assert failure.value.retryable is False


def test_a_slow_upstream_times_out_as_a_retryable_failure(fake_upstream):
    fake_upstream.configure("openai.embeddings", latency=1.0)
    with pytest.raises(UpstreamTimeout, match="timed out") as failure:
        http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]}, timeout=0.2)
    assert failure.value.retryable is True


def test_a_refused_connection_is_a_retryable_failure(settings):
    from ragmux.launch.embedded import free_port

    port = free_port()
    with pytest.raises(UpstreamFailed) as failure:
        http.request("GET", f"http://127.0.0.1:{port}/some/path", timeout=2)
    assert failure.value.retryable is True
    # Said in words, with what to check, and naming the origin only.
    assert failure.value.message == (
        f"Nothing is listening at http://127.0.0.1:{port} — check the base URL and that the server is running"
    )


def test_saving_a_connection_to_loopback_is_a_clear_400(api, settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    hostile_dns[PUBLIC_LOOKING] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    admin = api("admin")
    for base_url in (f"{fake_upstream.url}/v1", f"http://{PUBLIC_LOOKING}:{port}/v1"):
        response = admin.post(
            "/admin/api/models",
            json={"name": "sneaky", "provider_type": "openai", "base_url": base_url, "model_name": "m"},
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "private_upstream"
        assert "ALLOW_PRIVATE_UPSTREAMS=true or add it to PRIVATE_UPSTREAM_ALLOWLIST" in error["message"]
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1"]
    allowed = admin.post(
        "/admin/api/models",
        json={
            "name": "local-proxy",
            "provider_type": "openai",
            "base_url": f"{fake_upstream.url}/v1",
            "model_name": "m",
        },
    )
    assert allowed.status_code == 201


def stream_body(url: str, json_body: object = None, **kwargs) -> tuple[int, bytes]:
    """One call through the async path, from a synchronous test (an embeddings body unless given)."""

    async def call():
        async with http.open_stream("POST", url, json_body=json_body or {"input": ["x"]}, **kwargs) as upstream:
            return upstream.status, await upstream.read()

    # A loop of its own in a thread of its own: the session's browser keeps one running in this
    # thread once a dashboard test has started it.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, call()).result()


def test_the_async_path_applies_the_same_guard(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = []
    with pytest.raises(guard.UpstreamBlocked):
        stream_body(f"{fake_upstream.url}/v1/embeddings")
    hostile_dns[PUBLIC_LOOKING] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    with pytest.raises(guard.UpstreamBlocked, match=PUBLIC_LOOKING):
        stream_body(f"http://{PUBLIC_LOOKING}:{port}/v1/embeddings")
    assert fake_upstream.calls() == 0


def test_the_async_path_checks_every_redirect(settings, fake_upstream, hostile_dns):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["upstream.internal"]
    hostile_dns["upstream.internal"] = "127.0.0.1"
    port = fake_upstream.url.rsplit(":", 1)[1]
    fake_upstream.configure("openai.embeddings", redirect_to=f"http://127.0.0.1:{port}/api/embed")
    with pytest.raises(guard.UpstreamBlocked, match='upstream host "127.0.0.1"'):
        stream_body(f"http://upstream.internal:{port}/v1/embeddings")
    assert fake_upstream.calls("ollama.embed") == 0
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1"]
    fake_upstream.configure("openai.embeddings", redirect_to=f"{fake_upstream.url}/api/embed")
    assert stream_body(f"{fake_upstream.url}/v1/embeddings")[0] == 200
    assert fake_upstream.calls("ollama.embed") == 1


def test_the_async_path_caps_size_and_bounds_the_first_byte(fake_upstream):
    fake_upstream.configure("openai.embeddings", width=4096)
    with pytest.raises(UpstreamFailed, match="larger than"):
        stream_body(f"{fake_upstream.url}/v1/embeddings", max_bytes=10_000)
    fake_upstream.configure("openai.embeddings", width=8, latency=1.0)
    with pytest.raises(UpstreamTimeout, match="sent nothing within") as failure:
        stream_body(f"{fake_upstream.url}/v1/embeddings", first_byte_timeout=0.2)
    assert not failure.value.retryable


def test_the_timeout_bounds_a_json_call_whole_and_a_stream_only_until_its_first_byte(fake_upstream):
    fake_upstream.configure("openai.chat", chunk_interval=0.2)  # about 2.4 s from first to last chunk
    url = f"{fake_upstream.url}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    with pytest.raises(UpstreamTimeout, match="timed out after 1s"):
        stream_body(url, body, timeout=1)
    status, content = stream_body(url, body, timeout=1, streamed=True)
    assert status == 200 and content.endswith(b"data: [DONE]\n\n")


@pytest.fixture
def forward_proxy(monkeypatch):
    """A proxy named by HTTP_PROXY, as an operator behind an egress proxy sets it."""
    proxy = ForwardProxy().start()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    yield proxy
    proxy.stop()


def test_provider_calls_go_through_the_environment_proxy_when_private_upstreams_are_allowed(
    settings, fake_upstream, forward_proxy
):
    settings.ALLOW_PRIVATE_UPSTREAMS = True
    response = http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]})
    assert response.status == 200
    assert stream_body(f"{fake_upstream.url}/v1/embeddings")[0] == 200
    upstream = fake_upstream.url.removeprefix("http://")
    assert forward_proxy.carried == [upstream, upstream]
    assert fake_upstream.calls("openai.embeddings") == 2


def test_the_environment_proxy_is_ignored_while_the_ssrf_guard_is_on(settings, fake_upstream, forward_proxy):
    # The guard checks the address it connects to; behind a proxy it would check the proxy's.
    settings.ALLOW_PRIVATE_UPSTREAMS = False
    assert http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]}).status == 200
    assert stream_body(f"{fake_upstream.url}/v1/embeddings")[0] == 200
    assert forward_proxy.carried == []
    assert fake_upstream.calls("openai.embeddings") == 2


def test_no_proxy_hosts_are_called_directly(settings, fake_upstream, forward_proxy, monkeypatch):
    settings.ALLOW_PRIVATE_UPSTREAMS = True
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert http.request("POST", f"{fake_upstream.url}/v1/embeddings", json_body={"input": ["x"]}).status == 200
    assert stream_body(f"{fake_upstream.url}/v1/embeddings")[0] == 200
    assert forward_proxy.carried == []


ORIGIN = "http://gpu-box:8000"


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            httpx.ConnectError("[Errno 111] Connection refused"),
            f"Nothing is listening at {ORIGIN} — check the base URL and that the server is running",
        ),
        (
            _raised_from(httpx.ConnectError("connect failed"), ConnectionRefusedError(111, "Connection refused")),
            f"Nothing is listening at {ORIGIN} — check the base URL and that the server is running",
        ),
        (
            httpx.ConnectError("[Errno 113] No route to host"),
            "No network route to gpu-box — check the base URL and that this server's network can reach it",
        ),
        (
            httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"),
            "The TLS certificate of gpu-box was not accepted — check the host name in the base URL and that the "
            "server's certificate is valid",
        ),
        (
            httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1000)"),
            f"{ORIGIN} does not speak TLS — check whether the base URL should start with http://",
        ),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            f"{ORIGIN} closed the connection without an HTTP answer — check that the base URL's scheme (http or "
            "https) and port are the API's",
        ),
        (
            httpx.ReadError("[Errno 104] Connection reset by peer"),
            f"{ORIGIN} closed the connection without an HTTP answer — check that the base URL's scheme (http or "
            "https) and port are the API's",
        ),
        (httpx.ConnectError("boom"), f"The connection to {ORIGIN} failed (boom) — check the base URL"),
    ],
)
def test_a_transport_failure_is_said_in_words_with_what_to_check(failure, said):
    assert connection_failures.connection_failure_message(failure, f"{ORIGIN}/v1/chat/completions") == said


def test_an_https_url_to_a_plain_http_server_says_so(fake_upstream):
    https_url = fake_upstream.url.replace("http://", "https://")
    with pytest.raises(UpstreamFailed) as failure:
        http.request("POST", f"{https_url}/v1/embeddings", json_body={"input": ["x"]}, timeout=5)
    assert failure.value.message == (
        f"{https_url} does not speak TLS — check whether the base URL should start with http://"
    )


def test_a_host_that_cannot_be_found_is_said_in_words():
    with pytest.raises(UpstreamFailed) as failure:
        http.request("GET", "http://no-such-host.invalid/v1", timeout=2)
    assert failure.value.message.startswith("The host no-such-host.invalid cannot be found (")
    assert failure.value.message.endswith(
        "— check the spelling of the base URL and that this server's DNS knows the host"
    )
