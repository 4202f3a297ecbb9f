"""The blocking facade refuses a bad keyword before its loop thread starts (issue 33): it checks the keywords
with the async client's own checks (``ClientSettings.from_options``), so a typo costs no thread."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from acp_client import UsageError, sync

URL = "ws://127.0.0.1:1/acp"


@contextmanager
def threads_started() -> Iterator[list[str]]:
    """The names of the threads started inside the block (each new thread runs ``threading``'s trace hook
    once, as its first Python call: a real record, no patching)."""
    started: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        started.append(threading.current_thread().name)
        return None  # trace nothing further

    threading.settrace(hook)
    try:
        yield started
    finally:
        threading.settrace(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"backoff": "fast"}, "backoff"),
        ({"classifier": None}, "classifier"),
        ({"store": "sqlite"}, "store"),
        ({"timeouts": {"probe": 1}}, "timeouts"),
        ({"target_is_a_transport": True}, "reopen"),
    ],
    ids=lambda v: str(v),
)
def test_a_bad_keyword_is_refused_before_the_loop_thread_starts(options: dict[str, Any], named: str) -> None:
    target: object = URL
    if options.pop("target_is_a_transport", False):
        from acp_client.transports.memory import memory_pair

        target = memory_pair()[0]
    with threads_started() as started, pytest.raises(UsageError, match=named):
        sync.ReconnectingClient(target, **options)
    assert started == []


def test_an_unknown_keyword_is_a_type_error_before_the_loop_thread_starts() -> None:
    with threads_started() as started, pytest.raises(TypeError, match="retries_please"):
        sync.ReconnectingClient(URL, retries_please=3)
    assert started == []


def test_a_good_construction_starts_its_thread_and_a_deprecated_keyword_warns_once() -> None:
    with threads_started() as started, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = sync.ReconnectingClient(URL, recovery_tries=2)
    try:
        assert "acp-sync-reconnecting-client" in started  # the hook does see the facade's thread
        assert client.client.policy.tries == 2
        deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert len(deprecations) == 1 and "recovery_tries" in str(deprecations[0].message)
    finally:
        client.close()
