"""The public option objects: Timeouts, RecoveryPolicy, Limits, TransportOptions.

Each is frozen and checked at construction (an invalid value is a UsageError naming the field), round-trips
through dataclasses.replace, and is what ReconnectingClient/connect() run with. The flat keywords of the
previous release fold into them with a DeprecationWarning. Each timeout does its one job: shown over a
real loopback link to the ReferenceAgent for the probe and the replay silence.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import Any

import pytest

from acp_client import (
    Limits,
    ReconnectingClient,
    RecoveryPolicy,
    SessionRecoveryFailed,
    Timeouts,
    TransportOptions,
    UsageError,
    connect,
    sync,
)
from acp_client.testing import FAST_RETRY, ReferenceAgent
from acp_client.transports import CookieJar
from tests.conftest import started

FAST_POLICY = FAST_RETRY["policy"]

URL = "ws://127.0.0.1:1/acp"  # never connected to: these tests only build clients

INVALID: list[tuple[type[Any], str, object]] = [
    *[
        (Timeouts, name, bad)
        for name in ("initialize", "request", "recovery_deadline", "ready")
        for bad in (0, -1, float("nan"), float("inf"), "10", True)
    ],
    *[
        (Timeouts, name, bad)
        for name in ("probe", "strategy", "replay_silence", "list_check", "session_wait")
        for bad in (None, 0, -1.0, float("inf"), "10", False)
    ],
    (RecoveryPolicy, "concurrency", 0),
    (RecoveryPolicy, "concurrency", -3),
    (RecoveryPolicy, "concurrency", "fast"),
    (RecoveryPolicy, "concurrency", True),
    (RecoveryPolicy, "concurrency", 2.5),
    (RecoveryPolicy, "tries", 0),
    (RecoveryPolicy, "tries", -1),
    (RecoveryPolicy, "tries", 1.5),
    (RecoveryPolicy, "tries", True),
    (RecoveryPolicy, "start_jitter", -0.1),
    (RecoveryPolicy, "start_jitter", None),
    (RecoveryPolicy, "stable_after", -5),
    (RecoveryPolicy, "stable_after", float("nan")),
    (RecoveryPolicy, "suspended_interval", 0),
    (RecoveryPolicy, "suspended_interval", -30.0),
    (RecoveryPolicy, "unknown_session_codes", -32002),
    (RecoveryPolicy, "unknown_session_codes", "-32002"),
    (RecoveryPolicy, "unknown_session_codes", {"-32002"}),
    (RecoveryPolicy, "unknown_session_codes", {True}),
    (Limits, "event_buffer", 0),
    (Limits, "event_buffer", -1),
    (Limits, "event_buffer", 1.5),
    (Limits, "event_buffer", None),
    (Limits, "probe_concurrency", 0),
    (Limits, "probe_concurrency", False),
    (TransportOptions, "headers", "Authorization: x"),
    (TransportOptions, "cookies", {}),
    (TransportOptions, "ssl", True),
    (TransportOptions, "open_timeout", 0),
    (TransportOptions, "open_timeout", -1),
    (TransportOptions, "ping_interval", -1),
    (TransportOptions, "ping_timeout", 0),
    (TransportOptions, "close_timeout", None),
    (TransportOptions, "close_timeout", 0),
    (TransportOptions, "max_frame_bytes", 0),
    (TransportOptions, "max_frame_bytes", None),
    (TransportOptions, "max_frame_bytes", 1.5),
    (TransportOptions, "compression", "gzip"),
    (TransportOptions, "transport", "stdio"),
    (TransportOptions, "http2", "yes"),
    (TransportOptions, "http2", 1),
    (TransportOptions, "stdio_env", ["A=1"]),
    (TransportOptions, "stdio_cwd", 3),
    (TransportOptions, "on_stream_resumed", "not callable"),
]


@pytest.mark.parametrize(("kind", "field", "bad"), INVALID, ids=[f"{k.__name__}.{f}={b!r}" for k, f, b in INVALID])
def test_an_invalid_value_is_a_usage_error_naming_the_field_and_the_range(
    kind: type[Any], field: str, bad: object
) -> None:
    with pytest.raises(UsageError, match=rf"^{kind.__name__}\.{field} must be ") as caught:
        kind(**{field: bad})
    assert repr(bad) in str(caught.value) or field in ("headers", "stdio_env")  # values never shown (secrets)


@pytest.mark.parametrize("kind", [Timeouts, RecoveryPolicy, Limits, TransportOptions])
def test_every_field_is_documented_with_its_default(kind: type[Any]) -> None:
    doc = kind.__doc__ or ""
    for field in dataclasses.fields(kind):
        assert f"``{field.name}`` (default" in doc, f"{kind.__name__}.{field.name} is not documented"


@pytest.mark.parametrize("kind", [Timeouts, RecoveryPolicy, Limits, TransportOptions])
def test_the_objects_are_frozen_and_round_trip_through_dataclasses_replace(kind: type[Any]) -> None:
    default = kind()
    assert dataclasses.replace(default) == default
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.__setattr__(dataclasses.fields(kind)[0].name, None)


def test_replace_keeps_the_other_fields_and_checks_the_new_one() -> None:
    timeouts = Timeouts(probe=2.0, replay_silence=20.0)
    changed = dataclasses.replace(timeouts, probe=3.0)
    assert (changed.probe, changed.replay_silence, changed.request) == (3.0, 20.0, 30.0)
    policy = dataclasses.replace(RecoveryPolicy(unknown_session_codes=[-32002, -32603]), tries=5)
    assert policy.unknown_session_codes == frozenset({-32002, -32603}) and policy.tries == 5
    with pytest.raises(UsageError, match=r"Timeouts\.probe"):
        dataclasses.replace(timeouts, probe=-1)
    options = TransportOptions(headers={"A": "b"})
    assert dataclasses.replace(options, http2=False).cookies is options.cookies  # one jar, shared


def test_the_client_runs_with_the_objects_it_was_given() -> None:
    timeouts, policy, limits = Timeouts(probe=1.0), RecoveryPolicy(tries=7), Limits(event_buffer=9)
    jar = CookieJar()
    options = TransportOptions(cookies=jar, ping_interval=None)
    client = ReconnectingClient(URL, timeouts=timeouts, policy=policy, limits=limits, transport_options=options)
    assert (client.timeouts, client.policy, client.limits) == (timeouts, policy, limits)
    assert client.transport_options == options and client.transport_options.cookies is jar
    assert client.transport_options.on_stream_resumed is not None  # the client's own hook, added once


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"protocol_version": 3}, r"protocol_version must be 1, 2 or 'auto'"),
        ({"protocol_version": True}, r"protocol_version must be 1, 2 or 'auto'"),
        ({"timeouts": {"probe": 1}}, r"timeouts must be a Timeouts"),
        ({"policy": Timeouts()}, r"policy must be a RecoveryPolicy"),
        ({"limits": 5}, r"limits must be a Limits"),
        ({"transport_options": {}}, r"transport_options must be a TransportOptions"),
        ({"classifier": "retry"}, r"classifier must be a callable"),
        ({"on_auth_required": 1}, r"on_auth_required must be a callable"),
        ({"wait_for_ready": "yes"}, r"wait_for_ready must be True or False"),
    ],
)
def test_the_client_checks_its_other_keywords_at_construction(keywords: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ReconnectingClient(URL, **keywords)


def test_connect_checks_its_keywords_before_any_io() -> None:
    with pytest.raises(UsageError, match=r"protocol_version must be"):
        connect(URL, protocol_version=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"transport_options must be a TransportOptions"):
        connect(URL, transport_options={"http2": False})  # type: ignore[arg-type]


# ------------------------------------------------------------------ the flat keywords of the last release


def test_flat_keywords_still_work_for_one_release_and_warn() -> None:
    context = ssl.create_default_context()
    with pytest.warns(DeprecationWarning) as warned:
        client = ReconnectingClient(
            URL,
            request_timeout=5.0,
            recovery_timeout=2.0,
            recovery_tries=1,
            recovery_start_jitter=0.0,
            unknown_session_codes=[-32603],
            event_buffer=7,
            headers={"A": "b"},
            ssl=context,
            ping_interval=None,
        )
    assert len(warned) == 9
    assert all(issubclass(w.category, DeprecationWarning) for w in warned)
    assert "use policy=RecoveryPolicy(tries=...)" in str(warned[2].message)
    # recovery_timeout did four jobs: it still sets all four (the list check at four times)
    assert client.timeouts == Timeouts(request=5.0, probe=2.0, strategy=2.0, replay_silence=2.0, list_check=8.0)
    assert client.policy == RecoveryPolicy(tries=1, start_jitter=0.0, unknown_session_codes=frozenset({-32603}))
    assert client.limits == Limits(event_buffer=7)
    options = client.transport_options
    assert (options.headers, options.ssl, options.ping_interval) == ({"A": "b"}, context, None)


def test_a_flat_keyword_overrides_only_its_own_field_of_a_given_object() -> None:
    with pytest.warns(DeprecationWarning, match=r"recovery_tries"):
        client = ReconnectingClient(URL, policy=RecoveryPolicy(start_jitter=0.0), recovery_tries=2)
    assert client.policy == RecoveryPolicy(start_jitter=0.0, tries=2)


def test_invalid_flat_values_and_unknown_keywords_still_fail() -> None:
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(UsageError, match=r"RecoveryPolicy\.tries must be an int >= 1"),
    ):
        ReconnectingClient(URL, recovery_tries=0)
    with pytest.warns(DeprecationWarning), pytest.raises(UsageError, match=r"Timeouts\.probe"):
        ReconnectingClient(URL, recovery_timeout=-1)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'recovery_timout'"):
        ReconnectingClient(URL, recovery_timout=1.0)


def test_connect_folds_its_flat_keywords_too() -> None:
    with pytest.warns(DeprecationWarning) as warned:
        connector = connect(URL, request_timeout=3.0, http2=False)
    assert [str(w.message).split(" is ")[0] for w in warned] == ["connect(request_timeout=...)", "connect(http2=...)"]
    assert connector._timeouts.request == 3.0 and connector._options.http2 is False
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'recovery_tries'"):
        connect(URL, recovery_tries=1)  # a ReconnectingClient keyword, never one of connect()


def test_the_sync_facade_passes_the_objects_through_and_takes_its_wait_from_timeouts() -> None:
    client = sync.ReconnectingClient(URL, timeouts=Timeouts(ready=4.0), policy=RecoveryPolicy(tries=2))
    try:
        assert client.client.policy.tries == 2 and client.ready_timeout == 4.0
    finally:
        client.close()
    unbounded = sync.ReconnectingClient(URL, ready_timeout=None)
    try:
        assert unbounded.ready_timeout is None
    finally:
        unbounded.close()


# ------------------------------------------------------------------ one job per timeout, on a real link


@pytest.mark.parametrize("short", ["probe", "replay_silence"])
async def test_the_probe_timeout_bounds_the_status_probe_and_the_replay_silence_bounds_the_resume(short: str) -> None:
    """Every recovery request takes 0.6 s at the agent. The one setting made shorter than that fails the
    attempt at its own step; the other step, as slow, goes through."""
    async with ReferenceAgent(2) as agent:
        client, rec = await started(
            agent.url,
            timeouts=Timeouts(**{"probe": 30.0, "replay_silence": 30.0, short: 0.3}),
            policy=dataclasses.replace(FAST_POLICY, tries=1),
        )
        try:
            session = await client.new_session("/w")
            agent.set_capacity(100, service_time=0.6)
            await agent.drop_all_connections()
            failed = await rec.wait(lambda e: isinstance(e, SessionRecoveryFailed) and e.session_id == session.id)
            assert "Timeout" in failed[0].error
            assert agent.count("session/status", session.id) >= 1
            if short == "probe":  # every attempt fails at its probe: no resume is ever sent
                assert agent.count("session/resume", session.id) == 0
            else:  # the probe took 0.6 s, twice the replay silence, and went through; the resume did not
                assert agent.count("session/resume", session.id) >= 1
        finally:
            await client.aclose()
            await rec.close()


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("outage_timeout", 0),
        ("connect_timeout", -1),
        ("max_backoff", None),
        ("ping_interval", 0),
        ("max_frame_bytes", 0),
    ],
)
def test_the_bridge_options_are_checked_when_built(field: str, bad: object) -> None:
    from acp_client.bridge import BridgeOptions

    with pytest.raises(UsageError, match=rf"^BridgeOptions\.{field} must be "):
        BridgeOptions("ws://127.0.0.1:1/acp", **{field: bad})  # type: ignore[arg-type]
