"""Who may read the metrics: the start-up refuses settings that would publish them to anyone."""

import pytest

from ragmux.core.env import ConfigError
from ragmux.core.metrics_access import bearer_matches, check, on_public_port, refusal

TOKEN = "a-token-long-enough"


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"enabled": False, "token": TOKEN, "listen": None}, "METRICS_TOKEN: set, but METRICS_ENABLED is not true"),
        (
            {"enabled": False, "token": None, "listen": ("127.0.0.1", 9108)},
            "METRICS_LISTEN: set, but METRICS_ENABLED is not true",
        ),
        ({"enabled": True, "token": None, "listen": None}, "publish per-project usage and spend unauthenticated"),
        ({"enabled": True, "token": None, "listen": ("0.0.0.0", 9108)}, "unauthenticated"),
        ({"enabled": True, "token": "short", "listen": None}, "METRICS_TOKEN: at least 16 characters"),
        ({"enabled": True, "token": TOKEN + " x", "listen": None}, "no spaces"),
        ({"enabled": True, "token": TOKEN, "listen": ("127.0.0.1", 8765)}, "port 8765 is the public PORT"),
    ],
)
def test_settings_that_would_serve_the_metrics_openly_or_make_no_sense_stop_the_start(values, reason):
    with pytest.raises(ConfigError, match=reason):
        check(**values, public_port=8765)


@pytest.mark.parametrize(
    ("values", "public"),
    [
        ({"enabled": False, "token": None, "listen": None}, False),
        ({"enabled": True, "token": TOKEN, "listen": None}, True),
        ({"enabled": True, "token": None, "listen": ("127.0.0.1", 9108)}, False),
        ({"enabled": True, "token": None, "listen": ("::1", 9108)}, False),
        ({"enabled": True, "token": TOKEN, "listen": ("0.0.0.0", 9108)}, False),
    ],
)
def test_accepted_settings_say_where_the_metrics_are_served(values, public):
    check(**values, public_port=8765)
    assert on_public_port(**values) is public


def test_only_the_exact_bearer_token_reads():
    assert bearer_matches(f"Bearer {TOKEN}", TOKEN)
    assert bearer_matches(f"bearer {TOKEN}", TOKEN)
    for header in ("", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", "Bearer \x00"):
        assert not bearer_matches(header, TOKEN)
    assert refusal(authorization="", token=TOKEN) == 401
    assert refusal(authorization="", token=None) is None
