"""What several test modules share and is not a fixture: clients, waits, page helpers.

Test modules import from here, never from one another."""

from __future__ import annotations

from http.cookies import SimpleCookie

import httpx

# Models and Django's test clients are imported inside the functions: this module is loaded
# (through the fixtures) before Django is set up.


class APIClientTransport(httpx.BaseTransport):
    """Hands httpx's requests to DRF's ``APIClient`` inside the test's own transaction.

    The admin-API tests speak httpx, as a client of the API does; under them Django's test
    handler runs the request in this thread, on the test's connection, so nothing has to be
    committed and no server started (the live server stays for `/v1` and the browser). The
    cookie jar is httpx's: the ``APIClient`` forgets the cookies a response set."""

    def __init__(self) -> None:
        from rest_framework.test import APIClient

        # As a browser is: a session-authenticated write without its CSRF token is refused.
        self.client = APIClient(enforce_csrf_checks=True)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {name: value for name, value in request.headers.items() if name.lower() != "content-type"}
        path = request.url.raw_path.decode("ascii")
        response = self.client.generic(
            request.method,
            path,
            data=request.read(),
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        self.client.cookies = SimpleCookie()
        content = b"".join(response.streaming_content) if response.streaming else response.content
        set_cookies = [("set-cookie", morsel.OutputString()) for morsel in response.cookies.values()]
        return httpx.Response(
            response.status_code, headers=[*response.items(), *set_cookies], content=content, request=request
        )


def api_client(*, headers: dict[str, str] | None = None) -> httpx.Client:
    """An httpx client answered by the app in this process through :class:`APIClientTransport`."""
    return httpx.Client(transport=APIClientTransport(), base_url="http://testserver", headers=headers or {})


def translated_stream(provider, wire: bytes, *, piece: int = 7) -> list[dict]:
    """The OpenAI chunks a chat adapter makes of a streamed upstream body, fed to it in small
    pieces so that no event arrives whole."""
    import asyncio

    async def body():
        for start in range(0, len(wire), piece):
            yield wire[start : start + piece]

    async def collect():
        return [chunk async for chunk in provider._chunks(body())]

    return asyncio.run(collect())


def sse(*events: object) -> bytes:
    """A server-sent event stream of these JSON payloads (a string is sent as it is)."""
    import json

    return b"".join(
        f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode() for event in events
    )


def client_error(error) -> tuple[int, str, str | None]:
    """What a failed chat call tells the client: its status, OpenAI error type and code."""
    return error.status, error.type, error.code
