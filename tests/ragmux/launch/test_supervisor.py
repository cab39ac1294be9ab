"""The supervisor's back-off, as plain arithmetic (the children themselves: test_cli.py)."""

from __future__ import annotations

from ragmux.launch.supervisor import BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET, Backoff


def test_each_restart_waits_twice_as_long_up_to_the_most():
    backoff = Backoff()
    now = backoff.started_at + 1

    waits = [backoff.next_wait(now) for _ in range(8)]

    assert waits[:3] == [BACKOFF_FIRST, BACKOFF_FIRST * 2, BACKOFF_FIRST * 4]
    assert max(waits) == BACKOFF_MAX == waits[-1]


def test_a_child_that_ran_long_enough_is_restarted_at_once_again():
    backoff = Backoff()
    for _ in range(4):
        backoff.next_wait(backoff.started_at + 1)

    assert backoff.next_wait(backoff.started_at + BACKOFF_RESET) == BACKOFF_FIRST
