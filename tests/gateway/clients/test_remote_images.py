"""Remote `image_url`s through `/v1/chat/completions` to Gemini and Ollama, which take images
inline only: the gateway fetches them from a fake image host and sends them as base64, or
refuses the request in OpenAI's envelope before any chat call is made."""

from __future__ import annotations

import base64
import secrets
import threading
import time

import pytest

from tests.fakes.images import FakeImageHost, Served, png
from tests.helpers import wait_for_logs

PICTURE = png(2, 2)
PROVIDERS = {
    "gemini": {"path": "/v1beta", "model": "gemini-2.5-flash", "route": "gemini.generate"},
    "ollama": {"path": "", "model": "llama3.2", "route": "ollama.chat"},
}


@pytest.fixture
def image_host(settings):
    """The fake image host under a name of its own, which the test settings resolve to its
    loopback address (so no image of an earlier test is in the cache under its URLs)."""
    host = FakeImageHost(name=f"images-{secrets.token_hex(4)}.test").start()
    settings.IMAGE_FETCH_TEST_RESOLVER = {host.name: "127.0.0.1"}
    yield host
    host.stop()


@pytest.fixture
def private_host():
    """A server on loopback the gateway must never reach for an image."""
    host = FakeImageHost().start()
    host.serve("/secret.png", Served(PICTURE))
    yield host
    host.stop()


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request) -> str:
    return request.param


@pytest.fixture
def project(provider, fake_upstream):
    from gateway.clients.services import project_create
    from gateway.connections.services import connection_create

    spec = PROVIDERS[provider]
    connection = connection_create(
        name=f"{provider}-vision",
        provider_type=provider,
        base_url=f"{fake_upstream.url}{spec['path']}",
        model_name=spec["model"],
        dimensions=None,
        api_key="" if provider == "ollama" else "sk-vision-key-0123456789",
    )
    return project_create(
        name=f"{provider}-vision",
        chat_connection_id=connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )


@pytest.fixture
def chat(v1, project):
    """``chat(*urls, stream=False)`` asks the project's model about the images at ``urls``."""
    from gateway.clients.services import key_create

    client = v1(key_create(project=project, name="default", scopes=None, expires_at=None).key)

    def ask(*urls: str, stream: bool = False):
        content = [{"type": "text", "text": "What is in these pictures?"}]
        content += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
        return client.post(
            "/chat/completions", json={"messages": [{"role": "user", "content": content}], "stream": stream}
        )

    return ask


def images_sent(provider: str, sent: dict) -> list[tuple[str, str]]:
    """(media type, base64) of every image the provider was sent."""
    if provider == "gemini":
        parts = sent["contents"][-1]["parts"]
        return [(p["inlineData"]["mimeType"], p["inlineData"]["data"]) for p in parts if "inlineData" in p]
    return [("image/png", data) for data in sent["messages"][-1].get("images", [])]


def refused(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    return error


def assert_no_chat_call(fake_upstream, provider: str) -> None:
    assert fake_upstream.calls(PROVIDERS[provider]["route"]) == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_served_png_is_sent_inline(chat, provider, image_host, fake_upstream, project, stream):
    image_host.serve("/cat.png", Served(PICTURE, headers={"Content-Type": "application/octet-stream"}))
    response = chat(image_host.url("/cat.png"), stream=stream)
    assert response.status_code == 200, response.text
    route = "gemini.stream" if provider == "gemini" and stream else PROVIDERS[provider]["route"]
    sent = fake_upstream.requests_to(route)[-1].json()
    # The type comes from the bytes, not from what the image host said.
    assert images_sent(provider, sent) == [("image/png", base64.b64encode(PICTURE).decode())]
    assert image_host.requests == ["/cat.png"]
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 200


def test_an_image_is_fetched_once_for_a_request_naming_it_twice_and_kept_for_the_next(
    chat, provider, image_host, fake_upstream
):
    image_host.serve("/cat.png", Served(PICTURE))
    url = image_host.url("/cat.png")
    assert chat(url, url).status_code == 200
    assert chat(url).status_code == 200
    assert image_host.requests == ["/cat.png"]
    assert len(images_sent(provider, fake_upstream.requests_to(PROVIDERS[provider]["route"])[0].json())) == 2


def test_an_image_the_host_says_not_to_store_is_fetched_again(chat, image_host):
    image_host.serve("/live.png", Served(PICTURE, headers={"Cache-Control": "no-store"}))
    url = image_host.url("/live.png")
    assert chat(url).status_code == 200 and chat(url).status_code == 200
    assert image_host.requests == ["/live.png", "/live.png"]


@pytest.mark.parametrize("target", ["private server", "metadata address"])
def test_a_redirect_to_a_private_address_is_refused_without_reaching_it(
    chat, provider, image_host, private_host, fake_upstream, project, settings, target
):
    # ALLOW_PRIVATE_UPSTREAMS and the allow-list are for provider base URLs, never for images.
    settings.ALLOW_PRIVATE_UPSTREAMS = True
    location = {
        "private server": private_host.url("/secret.png"),
        "metadata address": "http://169.254.169.254/latest/meta-data/",
    }[target]
    image_host.serve("/moved.png", Served(status=302, headers={"Location": location}))
    error = refused(chat(image_host.url("/moved.png")), 400, "image_host_blocked")
    host = location.split("/")[2].rsplit(":", 1)[0]
    assert f'image host "{host}" resolves to a private or local address' in error["message"]
    assert image_host.requests == ["/moved.png"]
    assert private_host.requests == []
    assert_no_chat_call(fake_upstream, provider)
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 400


def test_an_image_url_naming_a_private_address_is_refused(chat, provider, private_host, fake_upstream, settings):
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1", "localhost"]
    for url in (private_host.url("/secret.png"), f"http://localhost:{private_host.port}/secret.png"):
        refused(chat(url), 400, "image_host_blocked")
    assert private_host.requests == []
    assert_no_chat_call(fake_upstream, provider)


@pytest.mark.parametrize(
    "host", ["0177.0.0.1", "127.0.0.01", "999.1.1.1", "[::ffff:0177.0.0.1]", "0x7f.1", "2130706433", "127.1"]
)
def test_an_image_url_whose_ipv4_is_not_in_dotted_decimal_is_a_400(chat, provider, fake_upstream, host):
    error = refused(chat(f"http://{host}/cat.png"), 400, "image_url_invalid")
    assert "http(s) URL" in error["message"]
    assert_no_chat_call(fake_upstream, provider)


@pytest.mark.parametrize("declared", [True, False], ids=["declared length", "undeclared length"])
def test_an_oversize_image_is_a_400(chat, provider, image_host, fake_upstream, settings, declared):
    settings.IMAGE_FETCH_MAX_MB = 1
    image_host.serve("/huge.png", Served(PICTURE + b"\0" * (1024 * 1024), declare_length=declared))
    error = refused(chat(image_host.url("/huge.png")), 400, "image_too_large")
    assert error["message"] == f"the image from {image_host.name} is larger than 1 MiB (IMAGE_FETCH_MAX_MB)"
    assert_no_chat_call(fake_upstream, provider)


def test_a_body_that_is_not_an_image_is_a_400(chat, provider, image_host, fake_upstream):
    image_host.serve("/cat.png", Served(b"<html>not a cat</html>", headers={"Content-Type": "image/png"}))
    error = refused(chat(image_host.url("/cat.png")), 400, "image_type_unsupported")
    assert error["message"] == f"the file from {image_host.name} is not a PNG, JPEG, GIF or WebP image"
    assert_no_chat_call(fake_upstream, provider)


def test_an_image_host_error_is_a_400_naming_only_the_host(chat, provider, image_host, fake_upstream):
    error = refused(chat(image_host.url("/missing.png?token=secret")), 400, "image_fetch_failed")
    assert error["message"] == f"could not fetch the image from {image_host.name}: it answered HTTP 404"
    assert_no_chat_call(fake_upstream, provider)


def test_an_image_host_that_does_not_resolve_is_blamed_on_the_image_url(chat, provider, fake_upstream):
    error = refused(chat("https://no-such-host.invalid/cat.png"), 400, "image_fetch_failed")
    assert error["message"] == (
        "could not fetch the image from no-such-host.invalid: the host cannot be found; check the image URL"
    )
    assert "base URL" not in error["message"]
    assert_no_chat_call(fake_upstream, provider)


def test_more_images_than_the_per_request_cap_is_a_400_before_any_fetch(
    chat, provider, image_host, fake_upstream, settings
):
    settings.IMAGE_FETCH_MAX_PER_REQUEST = 2
    for name in ("a", "b", "c"):
        image_host.serve(f"/{name}.png", Served(PICTURE))
    error = refused(chat(*(image_host.url(f"/{name}.png") for name in "abc")), 400, "too_many_images")
    assert "at most 2 remote images" in error["message"]
    assert image_host.requests == []
    assert_no_chat_call(fake_upstream, provider)


def test_remote_images_are_refused_when_fetching_is_off(chat, provider, image_host, fake_upstream, settings):
    settings.IMAGE_FETCH = False
    image_host.serve("/cat.png", Served(PICTURE))
    refused(chat(image_host.url("/cat.png")), 400, "image_fetch_disabled")
    assert image_host.requests == []
    assert_no_chat_call(fake_upstream, provider)


@pytest.mark.parametrize("provider", ["ollama"], indirect=True)
def test_a_saturated_process_answers_429_with_retry_after(chat, image_host, fake_upstream, project, settings):
    settings.IMAGE_FETCH_MAX_CONCURRENT = 1
    # A slot is waited for min(2 s, IMAGE_FETCH_TIMEOUT); the slow image holds the only one longer.
    settings.IMAGE_FETCH_TIMEOUT = 3
    image_host.serve("/slow.png", Served(PICTURE, delay=2.8))
    image_host.serve("/cat.png", Served(PICTURE))
    slow: list = []
    holder = threading.Thread(target=lambda: slow.append(chat(image_host.url("/slow.png"))))
    holder.start()
    deadline = time.monotonic() + 5
    while image_host.requests != ["/slow.png"] and time.monotonic() < deadline:
        time.sleep(0.01)
    response = chat(image_host.url("/cat.png"))
    holder.join()
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "image_fetch_saturated"
    assert response.headers["Retry-After"] == "3"
    assert slow[0].status_code == 200
    assert image_host.requests == ["/slow.png"]
    rows = wait_for_logs(2, project=project)
    assert sorted(row.status_code for row in rows) == [200, 429]


def test_a_route_fetches_the_image_once_for_every_target_that_needs_it(v1, image_host, fake_upstream):
    from gateway.clients.services import key_create, project_create
    from gateway.connections.services import connection_create
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="vision", strategy="ordered")
    for provider in ("gemini", "ollama"):
        spec = PROVIDERS[provider]
        connection = connection_create(
            name=f"vision-{provider}",
            provider_type=provider,
            base_url=f"{fake_upstream.url}{spec['path']}",
            model_name=spec["model"],
            dimensions=None,
            api_key="",
        )
        RouteTargetFactory(route=route, connection=connection, weight=1, first_byte_timeout=None)
    project = project_create(
        name="vision", chat_route_id=route.id, embedding_connection_id=None, store_id=None, system_prompt=""
    )
    # Gemini fails before its first byte: the route moves on to Ollama.
    fake_upstream.configure("gemini.generate", status=503)
    image_host.serve("/cat.png", Served(PICTURE))
    content = [{"type": "image_url", "image_url": {"url": image_host.url("/cat.png")}}]
    client = v1(key_create(project=project, name="default", scopes=None, expires_at=None).key)
    response = client.post("/chat/completions", json={"messages": [{"role": "user", "content": content}]})
    assert response.status_code == 200, response.text
    picture = base64.b64encode(PICTURE).decode()
    assert images_sent("gemini", fake_upstream.requests_to("gemini.generate")[-1].json()) == [("image/png", picture)]
    assert images_sent("ollama", fake_upstream.requests_to("ollama.chat")[-1].json()) == [("image/png", picture)]
    assert image_host.requests == ["/cat.png"]
