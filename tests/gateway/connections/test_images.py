"""The pieces of the remote image fetch: the type read from the bytes, the address guard, the
fair fetch slots and the cache. The fetch itself is tested through /v1
(tests/gateway/clients/test_remote_images.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.connections.images import FairSlots, ImageCache, InlineImage, image_addresses, media_type_of
from ragmux.core.errors import InvalidInput
from ragmux.core.units import MIB
from tests.fakes.images import png
from tests.helpers import off_the_main_thread


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        (png(), "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"),
        (b"GIF87a\x01\x00", "image/gif"),
        (b"GIF89a\x01\x00", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", None),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None),
        (b"%PDF-1.7", None),
        (b"", None),
    ],
)
def test_the_type_is_read_from_the_bytes(data, media_type):
    assert media_type_of(data) == media_type


@pytest.mark.parametrize("host", ["127.0.0.1", "169.254.169.254", "10.1.2.3", "[::1]", "[::ffff:192.168.0.1]"])
def test_private_image_hosts_are_refused_whatever_the_provider_settings_allow(settings, host):
    settings.ALLOW_PRIVATE_UPSTREAMS = True
    settings.PRIVATE_UPSTREAM_ALLOWLIST = ["127.0.0.1", "10.0.0.0/8", "169.254.169.254"]
    with pytest.raises(InvalidInput) as refused:
        image_addresses(host, 80)
    assert refused.value.code == "image_host_blocked"


def test_while_a_project_waits_another_cannot_take_more_than_half_the_slots():
    async def scenario() -> list[str]:
        slots = FairSlots()
        granted: list[str] = []
        done = {label: asyncio.Event() for label in ("a1", "a2", "b1", "b2", "a3", "c1")}

        async def hold(owner: str, label: str) -> None:
            async with slots.slot(owner, capacity=4, wait=5) as taken:
                assert taken
                granted.append(label)
                await done[label].wait()

        async def start(owner: str, label: str) -> asyncio.Task:
            task = asyncio.create_task(hold(owner, label))
            await asyncio.sleep(0.01)
            return task

        # A and B hold two slots each; then A asks for a third, and C for one.
        tasks = [await start(owner, label) for owner, label in (("A", "a1"), ("A", "a2"), ("B", "b1"), ("B", "b2"))]
        tasks += [await start("A", "a3"), await start("C", "c1")]
        for label in ("b1", "b2"):
            done[label].set()
            await asyncio.sleep(0.01)
        for event in done.values():
            event.set()
        await asyncio.gather(*tasks)
        return granted

    # The first freed slot goes to C, who asked later: A holds half while C waits. The second
    # goes to A, as no one else is waiting then.
    assert off_the_main_thread(asyncio.run, scenario()) == ["a1", "a2", "b1", "b2", "c1", "a3"]


def test_a_slot_not_free_within_the_wait_is_not_taken():
    async def scenario() -> tuple[bool, bool]:
        slots = FairSlots()
        async with slots.slot("A", capacity=1, wait=1) as first:
            async with slots.slot("B", capacity=1, wait=0.05) as second:
                pass
        async with slots.slot("B", capacity=1, wait=0.05) as again:
            pass
        return first and not second, again

    assert off_the_main_thread(asyncio.run, scenario()) == (True, True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def image(size: int) -> InlineImage:
    return InlineImage("image/png", "A" * size)


def test_cached_images_expire_after_the_ttl(settings):
    settings.IMAGE_CACHE_TTL = 60
    clock = Clock()
    cache = ImageCache(clock)
    cache.put("u", image(4))
    clock.now = 59.9
    assert cache.get("u") == image(4)
    clock.now = 60
    assert cache.get("u") is None


def test_the_cache_keeps_the_most_recently_used_within_its_entries_and_bytes(settings):
    settings.IMAGE_CACHE_ENTRIES, settings.IMAGE_CACHE_MAX_MB = 2, 1
    cache = ImageCache(Clock())
    cache.put("a", image(4))
    cache.put("b", image(4))
    cache.get("a")
    cache.put("c", image(4))
    assert [cache.get(url) is not None for url in "abc"] == [True, False, True]
    cache.put("big", image(MIB - 3))
    assert [cache.get(url) is not None for url in ("a", "c", "big")] == [False, False, True]
    cache.put("huge", image(MIB + 1))
    assert cache.get("huge") is None and cache.get("big") is not None


def test_no_entries_keeps_nothing(settings):
    settings.IMAGE_CACHE_ENTRIES = 0
    cache = ImageCache(Clock())
    cache.put("a", image(4))
    assert cache.get("a") is None
