"""Remote images fetched by the gateway for providers that take images inline only.

Gemini (for anything but its Files API and Cloud Storage) and Ollama cannot read an
``image_url`` by its URL, so the gateway downloads the image and sends it as base64. The URL
comes from whoever holds an API key, not from an editor, so the fetch is stricter than a
provider call:

- it goes through the one outbound client, with a guard of its own that refuses every private,
  loopback, link-local and metadata address, whatever ``ALLOW_PRIVATE_UPSTREAMS`` and
  ``PRIVATE_UPSTREAM_ALLOWLIST`` say (they are for provider base URLs), at every redirect hop;
- the image is at most ``IMAGE_FETCH_MAX_MB`` (the declared length, then the bytes read), must
  arrive within ``IMAGE_FETCH_TIMEOUT``, and its type is read from its first bytes (PNG, JPEG,
  GIF or WebP), not from what the server says;
- a request names at most ``IMAGE_FETCH_MAX_PER_REQUEST`` of them, fetched one after another;
- at most ``IMAGE_FETCH_MAX_CONCURRENT`` fetches run in a process at once (:class:`FairSlots`);
- fetched images are kept a while (:class:`ImageCache`).

Every refusal is a 400 whose message names the image's host, never its URL, except the
saturated process, a 429 the client may retry.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from gateway.connections import guard, http
from ragmux.core.errors import InvalidInput, RateLimited, UpstreamFailed, UpstreamTimeout
from ragmux.core.units import MIB

# How long a fetch waits for a free slot at most; the fetch's own timeout when shorter.
SLOT_WAIT_SECONDS = 2.0
# The types an image may have, by the bytes it starts with (WebP: a RIFF file of type WEBP).
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def media_type_of(data: bytes) -> str | None:
    """The image type ``data`` is, read from its magic number; None when it is none we send."""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class InlineImage:
    media_type: str
    data: str  # base64

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


# --------------------------------------------------------------------------------------------
# The guard
# --------------------------------------------------------------------------------------------


def image_addresses(host: str, port: int) -> list[guard.Address]:
    """The public addresses of an image host; a host with none is refused. The test suite's
    stand-in names (IMAGE_FETCH_TEST_RESOLVER, refused at start-up outside it) resolve as it says."""
    stand_in = settings.IMAGE_FETCH_TEST_RESOLVER.get(host.lower())
    if stand_in is not None:
        return [ipaddress.ip_address(stand_in)]
    try:
        addresses = guard.resolve(host, port)
    except UpstreamFailed:
        # Not a provider's base URL, which resolve()'s own wording would blame.
        raise _failed(host, "the host cannot be found; check the image URL") from None
    public = [address for address in addresses if not guard.is_private_address(address)]
    if not public:
        raise InvalidInput(
            f'image host "{host}" resolves to a private or local address; image URLs must be public',
            code="image_host_blocked",
        )
    return public


# --------------------------------------------------------------------------------------------
# Slots: how many fetches run at once, shared fairly
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    owner: str
    loop: asyncio.AbstractEventLoop
    woken: asyncio.Future
    granted: bool = False


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class FairSlots:
    """At most ``capacity`` holders at once, granted first come, first served, with one rule
    of fairness: while an owner (a project) is waiting, no other owner takes more than half the
    slots. Shared by every event loop of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._waiting: list[_Waiter] = []

    def _may_take(self, owner: str, capacity: int) -> bool:
        if self._held.total() >= capacity:
            return False
        others_wait = any(waiter.owner != owner for waiter in self._waiting)
        return not others_wait or self._held[owner] < max(1, capacity // 2)

    def _grant_waiting(self, capacity: int) -> None:
        for waiter in list(self._waiting):
            if self._may_take(waiter.owner, capacity):
                self._waiting.remove(waiter)
                self._held[waiter.owner] += 1
                waiter.granted = True
                waiter.loop.call_soon_threadsafe(_wake, waiter.woken)

    def _give_back(self, owner: str, capacity: int) -> None:
        with self._lock:
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]
            self._grant_waiting(capacity)

    async def _take(self, owner: str, capacity: int, wait: float) -> bool:
        """Takes a slot for ``owner``; False when none was free within ``wait`` seconds."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._may_take(owner, capacity):
                self._held[owner] += 1
                return True
            waiter = _Waiter(owner, loop, loop.create_future())
            self._waiting.append(waiter)
        try:
            async with asyncio.timeout(wait):
                await waiter.woken
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiting.remove(waiter)
                    # Others may wait only on this waiter's owner's fair share.
                    self._grant_waiting(capacity)
            if granted:
                self._give_back(owner, capacity)
            raise
        with self._lock:
            if not waiter.granted:
                self._waiting.remove(waiter)
                self._grant_waiting(capacity)
            return waiter.granted

    @asynccontextmanager
    async def slot(self, owner: str, *, capacity: int, wait: float) -> AsyncIterator[bool]:
        """Holds a slot for the block; yields False (holding none) when none came within ``wait``."""
        taken = await self._take(owner, capacity, wait)
        try:
            yield taken
        finally:
            if taken:
                self._give_back(owner, capacity)


_slots = FairSlots()


# --------------------------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------------------------


class ImageCache:
    """Fetched images by URL, least recently used out first: at most ``IMAGE_CACHE_ENTRIES``
    images (0: none kept) of ``IMAGE_CACHE_MAX_MB`` base64 in all, each for ``IMAGE_CACHE_TTL``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, InlineImage]] = OrderedDict()
        self._bytes = 0

    def _drop(self, url: str) -> None:
        _, image = self._entries.pop(url)
        self._bytes -= len(image.data)

    def get(self, url: str) -> InlineImage | None:
        with self._lock:
            found = self._entries.get(url)
            if found is None:
                return None
            if found[0] <= self._clock():
                self._drop(url)
                return None
            self._entries.move_to_end(url)
            return found[1]

    def put(self, url: str, image: InlineImage) -> None:
        entries, limit = settings.IMAGE_CACHE_ENTRIES, settings.IMAGE_CACHE_MAX_MB * MIB
        if entries == 0 or len(image.data) > limit:
            return
        with self._lock:
            if url in self._entries:
                self._drop(url)
            self._entries[url] = (self._clock() + settings.IMAGE_CACHE_TTL, image)
            self._bytes += len(image.data)
            while len(self._entries) > entries or self._bytes > limit:
                self._drop(next(iter(self._entries)))


_cache = ImageCache()


# --------------------------------------------------------------------------------------------
# The fetch
# --------------------------------------------------------------------------------------------


def _too_large(host: str) -> InvalidInput:
    return InvalidInput(
        f"the image from {host} is larger than {settings.IMAGE_FETCH_MAX_MB} MiB (IMAGE_FETCH_MAX_MB)",
        code="image_too_large",
    )


def _failed(host: str, reason: str) -> InvalidInput:
    return InvalidInput(f"could not fetch the image from {host}: {reason}", code="image_fetch_failed")


async def _download(url: str, host: str) -> tuple[bytes, bool]:
    """The image's bytes, and whether the server allows keeping them (no ``no-store``)."""
    limit = settings.IMAGE_FETCH_MAX_MB * MIB
    timeout = settings.IMAGE_FETCH_TIMEOUT
    try:
        async with asyncio.timeout(timeout):
            async with http.open_stream(
                "GET",
                url,
                headers={"Accept": "image/*"},
                timeout=timeout,
                first_byte_timeout=timeout,
                max_bytes=limit,
                guard=image_addresses,
            ) as upstream:
                if not 200 <= upstream.status < 300:
                    raise _failed(host, f"it answered HTTP {upstream.status}")
                declared = upstream.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise _too_large(host)
                data = await upstream.read()
                storable = "no-store" not in upstream.headers.get("cache-control", "").lower()
    except TimeoutError:
        raise _failed(host, f"no answer within {timeout:g}s (IMAGE_FETCH_TIMEOUT)") from None
    except http.ResponseTooLarge:
        raise _too_large(host) from None
    except UpstreamTimeout:
        raise _failed(host, f"no answer within {timeout:g}s (IMAGE_FETCH_TIMEOUT)") from None
    except UpstreamFailed as exc:
        raise _failed(host, exc.message) from None
    return data, storable


@dataclass
class RemoteImages:
    """The remote images of one chat request, fetched for ``owner`` (whose share of the fetch
    slots is kept fair), each once however many providers of a route need it."""

    owner: str
    _fetched: dict[str, InlineImage] = field(default_factory=dict)

    async def _image(self, url: str) -> InlineImage:
        try:
            host = guard.parse_url(url).host
        except guard.InvalidUrl as exc:
            raise InvalidInput(
                f"an image_url must be an http(s) URL or a data: URL (base64): {exc}", code="image_url_invalid"
            ) from None
        cached = self._fetched.get(url) or _cache.get(url)
        if cached is not None:
            return cached
        timeout = settings.IMAGE_FETCH_TIMEOUT
        async with _slots.slot(
            self.owner, capacity=settings.IMAGE_FETCH_MAX_CONCURRENT, wait=min(SLOT_WAIT_SECONDS, timeout)
        ) as taken:
            if not taken:
                error = RateLimited(
                    "too many images are being fetched right now; retry shortly", code="image_fetch_saturated"
                )
                error.retry_after = max(1, math.ceil(timeout))
                raise error
            data, storable = await _download(url, host)
        media_type = media_type_of(data)
        if media_type is None:
            raise InvalidInput(
                f"the file from {host} is not a PNG, JPEG, GIF or WebP image", code="image_type_unsupported"
            )
        image = InlineImage(media_type, base64.b64encode(data).decode("ascii"))
        if storable:
            _cache.put(url, image)
        return image

    async def inlined(self, body: dict[str, Any], fetches: Callable[[str], bool]) -> dict[str, Any]:
        """``body`` with every image whose URL ``fetches`` picks fetched and put in as a data: URL;
        ``body`` itself is left as it is."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        remote = {url for message in messages for url in _image_urls(message) if fetches(url)}
        if not remote:
            return body
        if not settings.IMAGE_FETCH:
            raise InvalidInput(
                "this gateway does not fetch remote images (IMAGE_FETCH is off); send the image as a "
                "data: URL (base64)",
                code="image_fetch_disabled",
            )
        if len(remote) > settings.IMAGE_FETCH_MAX_PER_REQUEST:
            raise InvalidInput(
                f"a request may name at most {settings.IMAGE_FETCH_MAX_PER_REQUEST} remote images "
                f"(IMAGE_FETCH_MAX_PER_REQUEST); it names {len(remote)}",
                code="too_many_images",
            )
        # One after another, in the order the request names them.
        for message in messages:
            for url in _image_urls(message):
                if url in remote and url not in self._fetched:
                    self._fetched[url] = await self._image(url)
        return {**body, "messages": [_with_data_urls(message, self._fetched) for message in messages]}


def _image_url(part: Any) -> str | None:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return url if isinstance(url, str) else None


def _image_urls(message: Any) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [url for url in map(_image_url, content) if url]


def _with_data_urls(message: Any, fetched: dict[str, InlineImage]) -> Any:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        url = _image_url(part)
        if url in fetched:
            image = part["image_url"] if isinstance(part["image_url"], dict) else {}
            part = {**part, "image_url": {**image, "url": fetched[url].data_url}}
        parts.append(part)
    return {**message, "content": parts}
