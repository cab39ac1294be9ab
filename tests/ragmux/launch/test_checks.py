"""Start-up checks run in-process (test_startup runs the `ragmux` command itself)."""

import logging

import pytest

from ragmux.launch.checks import log_image_policy, refuse_test_only_settings


def test_the_stand_in_resolution_for_image_hosts_stops_start_up(settings):
    refuse_test_only_settings()
    settings.IMAGE_FETCH_TEST_RESOLVER = {"images.test": "127.0.0.1"}
    with pytest.raises(SystemExit, match="IMAGE_FETCH_TEST_RESOLVER is for the test suite only"):
        refuse_test_only_settings()


@pytest.mark.parametrize(
    ("fetch", "line"),
    [
        (
            True,
            "image policy: remote images fetched up to 8 MiB within 10s, 8 per request, 16 at once; "
            "private addresses never reached",
        ),
        (False, "image policy: remote images are not fetched (IMAGE_FETCH=false); data: URLs only"),
    ],
)
def test_the_image_policy_is_logged_once_at_start(settings, caplog, fetch, line):
    settings.IMAGE_FETCH = fetch
    with caplog.at_level(logging.INFO, logger="ragmux.startup"):
        log_image_policy()
    assert caplog.messages == [line]
