"""Every keyword of every public constructor is checked when it is given (issue 33): a bad value is a
``UsageError`` naming the keyword at construction, never a failure later (``Workspace(permission="allow")``
used to be accepted and then fail every write with ``TypeError: 'str' object is not callable``, which the
agent saw as ``-32603``).

One table walks the public classes an application constructs (everything in ``acp_client.__all__`` but the
exceptions, events and values the SDK makes), ``connect()`` and the blocking facade, with a bad value for
every keyword; a second test checks that the table leaves no keyword out.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

import acp_client
from acp_client import (
    ACPClient,
    Backoff,
    ClientHandlers,
    CrashLoopBreaker,
    DefaultStrategy,
    Forget,
    Keep,
    Limits,
    MemorySessionStore,
    Reattach,
    ReconnectingClient,
    RecoveryPolicy,
    RedisSessionStore,
    SQLiteSessionStore,
    Timeouts,
    TransportOptions,
    UsageError,
    WireLog,
    Workspace,
    connect,
    sync,
)
from acp_client.transports.memory import memory_pair

URL = "ws://127.0.0.1:1/acp"

#: the public names that are no class an application constructs, and why
MADE_BY_THE_SDK = {
    "AgentProcess": "a snapshot of a stdio agent's process, read from ACPClient.agent_process",
    "Capabilities": "what a new connection offers, handed to a strategy",
    "StatusProbe": "the status probe's result, handed to a strategy",
    "ElicitationRequest": "an agent's request, handed to the handlers",
    "PermissionOption": "part of an agent's permission request",
    "PermissionRequest": "an agent's request, handed to the handlers",
    "PendingWrite": "a write shown to Workspace's before_write",
    "PromptResult": "what prompt() returns",
    "PromptReceipt": "what send_prompt() returns",
    "PromptEntry": "made by the session's prompt ledger (or read back from a store)",
    "PromptLedger": "made by the session (Session.prompt_ledger)",
    "RecoveryMarker": "an item of a session's update stream",
    "SessionUpdate": "an item of a session's update stream",
    "UpdatesDropped": "an item of a session's update stream",
    "Session": "made by new_session()/resume_session()/load_session()",
    "SessionInfo": "an entry of list_sessions()",
    "SessionRecord": "what a store writes and reads back (a store reads old records into it)",
    "StoredSession": "what RedisSessionStore.describe() returns (an operator's read-only view)",
}

#: keywords a bare ACPClient takes from the ReconnectingClient that runs it (wiring, not settings)
WIRING = {
    ("ACPClient", "registry"),
    ("ACPClient", "session_owner"),
    ("ACPClient", "generation"),
    ("ACPClient", "wire"),
}


def _made_by_the_sdk(name: str, obj: object) -> bool:
    if not inspect.isclass(obj):
        return True  # functions (connect is walked below), __version__
    if issubclass(obj, BaseException | enum.Enum) or Protocol in getattr(obj, "__mro__", ()):
        return True
    module = obj.__module__
    if module.startswith(("acp_client.reconnect._events", "acp_client.schema")):
        return True  # events and typed update views
    return name in MADE_BY_THE_SDK


def _transport() -> Any:
    return memory_pair()[0]


def _root(tmp: Path) -> list[Path]:
    return [tmp]


#: how to make each constructor with good values for what it needs: tmp_path -> (callable, args, kwargs)
Maker = Callable[[Path], tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]
MAKERS: dict[str, Maker] = {
    "ReconnectingClient": lambda tmp: (ReconnectingClient, (URL,), {}),
    "connect": lambda tmp: (connect, (URL,), {}),
    "ACPClient": lambda tmp: (ACPClient, (_transport(),), {}),
    "Backoff": lambda tmp: (Backoff, (), {}),
    "CrashLoopBreaker": lambda tmp: (CrashLoopBreaker, (), {}),
    "DefaultStrategy": lambda tmp: (DefaultStrategy, (), {}),
    "Reattach": lambda tmp: (Reattach, (), {"mode": "resume", "replay": True}),
    "Forget": lambda tmp: (Forget, (), {}),
    "Keep": lambda tmp: (Keep, (), {}),
    "Timeouts": lambda tmp: (Timeouts, (), {}),
    "RecoveryPolicy": lambda tmp: (RecoveryPolicy, (), {}),
    "Limits": lambda tmp: (Limits, (), {}),
    "TransportOptions": lambda tmp: (TransportOptions, (), {}),
    "MemorySessionStore": lambda tmp: (MemorySessionStore, (), {}),
    "SQLiteSessionStore": lambda tmp: (SQLiteSessionStore, (tmp / "s.db",), {}),
    "RedisSessionStore": lambda tmp: (RedisSessionStore, ("redis://127.0.0.1:1/0",), {}),
    "Workspace": lambda tmp: (Workspace, (_root(tmp),), {}),
    "WireLog": lambda tmp: (WireLog, (tmp / "wire.jsonl",), {}),
    "ClientHandlers": lambda tmp: (ClientHandlers, (), {}),
    "sync.connect": lambda tmp: (sync.connect, (URL,), {}),
    "sync.ReconnectingClient": lambda tmp: (sync.ReconnectingClient, (URL,), {}),
}

#: (constructor, keyword, a bad value); a positional parameter is given by keyword here
BAD: list[tuple[str, str, object]] = [
    ("ReconnectingClient", "target", 42),
    ("ReconnectingClient", "handlers", "yes"),
    ("ReconnectingClient", "protocol_version", 3),
    ("ReconnectingClient", "client_info", {"name": 1}),
    ("ReconnectingClient", "store", "sqlite"),
    ("ReconnectingClient", "strategy", 42),
    ("ReconnectingClient", "policy", {}),
    ("ReconnectingClient", "should_own", "all"),
    ("ReconnectingClient", "mcp_secrets", "blank"),
    ("ReconnectingClient", "timeouts", {"probe": 1}),
    ("ReconnectingClient", "limits", 5),
    ("ReconnectingClient", "transport_options", {}),
    ("ReconnectingClient", "backoff", "fast"),
    ("ReconnectingClient", "breaker", 5),
    ("ReconnectingClient", "classifier", "retry"),
    ("ReconnectingClient", "classifier", None),  # not a documented value: it used to fail at the first error
    ("ReconnectingClient", "on_auth_required", 1),
    ("ReconnectingClient", "wait_for_ready", "yes"),
    ("ReconnectingClient", "wire_log", 42),
    ("ReconnectingClient", "wire_log", ""),
    ("ReconnectingClient", "wire_log", WireLog),
    ("ReconnectingClient", "clock", "wall"),
    ("ReconnectingClient", "rng", 42),
    ("connect", "target", 42),
    ("connect", "handlers", 3.5),
    ("connect", "protocol_version", "2"),
    ("connect", "timeouts", 1),
    ("connect", "transport_options", "tls"),
    ("connect", "client_info", ["acp"]),
    ("connect", "wire_log", 42),
    ("ACPClient", "transport", None),
    ("ACPClient", "handlers", "x"),
    ("ACPClient", "client_info", "x"),
    ("ACPClient", "request_timeout", -1),
    ("Backoff", "base", -1),
    ("Backoff", "cap", float("inf")),
    ("Backoff", "hint_jitter", -0.1),
    ("Backoff", "rng", "seed"),
    ("CrashLoopBreaker", "threshold", 0),
    ("CrashLoopBreaker", "short_lived", -1),
    ("CrashLoopBreaker", "window", 0),
    ("CrashLoopBreaker", "clock", "now"),
    ("DefaultStrategy", "replay", "yes"),
    ("DefaultStrategy", "forget_unknown", None),
    ("Reattach", "mode", "reload"),
    ("Reattach", "replay", 1),
    ("Reattach", "outcome", "done"),
    ("Forget", "reason", 3),
    ("Keep", "reason", None),
    ("Timeouts", "initialize", 0),
    ("Timeouts", "request", -0.3),
    ("Timeouts", "probe", None),
    ("Timeouts", "strategy", "10"),
    ("Timeouts", "replay_silence", 0),
    ("Timeouts", "recovery_deadline", -1),
    ("Timeouts", "recovery_round", float("nan")),
    ("Timeouts", "list_check", True),
    ("Timeouts", "session_wait", 0),
    ("Timeouts", "ready", -1),
    ("RecoveryPolicy", "concurrency", 0),
    ("RecoveryPolicy", "tries", 0),
    ("RecoveryPolicy", "start_jitter", -1),
    ("RecoveryPolicy", "unknown_session_codes", "-32002"),
    ("RecoveryPolicy", "dialects", {}),
    ("RecoveryPolicy", "startup_refusals", -1),
    ("RecoveryPolicy", "stable_after", -1),
    ("RecoveryPolicy", "suspended_interval", 0),
    ("RecoveryPolicy", "adopt_jitter", -1),
    ("Limits", "event_buffer", 0),
    ("Limits", "probe_concurrency", 0),
    ("Limits", "replay_updates", 0),
    ("Limits", "adopt_per_second", 0),
    ("TransportOptions", "headers", "Authorization: x"),
    ("TransportOptions", "cookies", {}),
    ("TransportOptions", "ssl", True),
    ("TransportOptions", "open_timeout", 0),
    ("TransportOptions", "ping_interval", -1),
    ("TransportOptions", "ping_timeout", 0),
    ("TransportOptions", "close_timeout", None),
    ("TransportOptions", "max_frame_bytes", 0),
    ("TransportOptions", "compression", "gzip"),
    ("TransportOptions", "transport", "stdio"),
    ("TransportOptions", "stdio_env", ["A=1"]),
    ("TransportOptions", "stdio_cwd", 3),
    ("TransportOptions", "http2", "yes"),
    ("TransportOptions", "on_stream_resumed", "not callable"),
    ("TransportOptions", "follow_redirects", "yes"),
    ("SQLiteSessionStore", "path", 3),
    ("RedisSessionStore", "url", 42),
    ("RedisSessionStore", "namespace", ""),
    ("RedisSessionStore", "lease_ttl", 0),
    ("RedisSessionStore", "owner_id", "a|b"),
    ("RedisSessionStore", "retry_for", -1),
    ("RedisSessionStore", "socket_timeout", 0),
    ("RedisSessionStore", "batch_size", 0),
    ("RedisSessionStore", "max_connections", 0),
    ("RedisSessionStore", "release_on_close", "yes"),
    ("WireLog", "target", 3),
    ("WireLog", "target", ""),
    ("WireLog", "payloads", "yes"),
    ("WireLog", "max_bytes", 100),
    ("WireLog", "backups", -1),
    ("WireLog", "payload_limit", None),
    ("WireLog", "queue", 0),
    ("sync.ReconnectingClient", "wire_log", 3.5),
    ("Workspace", "roots", "/tmp"),
    ("Workspace", "permission", "allow"),
    ("Workspace", "permission", True),
    ("Workspace", "ask_before", "write"),
    ("Workspace", "read_only", "no"),
    ("Workspace", "max_read_bytes", 0),
    ("Workspace", "allow_hard_links", None),
    ("Workspace", "buffers", "editor"),
    ("Workspace", "before_write", 1),
    ("Workspace", "max_terminals", 0),
    ("Workspace", "max_output_bytes", -1),
    ("Workspace", "env", {"PATH": 1}),
    ("Workspace", "inherit_env", "yes"),
    ("sync.connect", "timeout", -1),
    ("sync.connect", "handlers", "x"),
    ("sync.ReconnectingClient", "ready_timeout", -1),
    ("sync.ReconnectingClient", "backoff", "fast"),
    ("sync.ReconnectingClient", "store", "sqlite"),
    ("sync.ReconnectingClient", "classifier", None),
]


def _call(name: str, keyword: str, bad: object, tmp: Path) -> object:
    make, args, kwargs = MAKERS[name](tmp)
    parameters = list(inspect.signature(make).parameters.values())
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if keyword in positional[: len(args)]:
        args = tuple(bad if p == keyword else a for p, a in zip(positional, args, strict=False))
    else:
        kwargs = {**kwargs, keyword: bad}
    return make(*args, **kwargs)


@pytest.mark.parametrize(("name", "keyword", "bad"), BAD, ids=[f"{n}({k}={b!r})" for n, k, b in BAD])
def test_a_bad_value_is_refused_at_construction_naming_its_keyword(
    name: str, keyword: str, bad: object, tmp_path: Path
) -> None:
    with pytest.raises(UsageError) as caught:
        _call(name, keyword, bad, tmp_path)
    assert re.search(rf"\b{re.escape(keyword)}\b", str(caught.value)), f"{caught.value} does not name {keyword}"
    if keyword in ("headers", "env", "stdio_env", "client_info"):
        assert repr(bad) not in str(caught.value)  # values that may be secrets are never shown


def _keywords(name: str, tmp: Path) -> set[str]:
    make, _, _ = MAKERS[name](tmp)
    target = make.__init__ if inspect.isclass(make) else make  # type: ignore[misc]
    parameters = inspect.signature(target).parameters.values()
    variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    return {p.name for p in parameters if p.name != "self" and p.kind not in variadic}


#: the blocking facade hands its async twin's keywords over as they are: the twin's rows cover those
TWINS = {"sync.connect": "connect", "sync.ReconnectingClient": "ReconnectingClient"}


def test_the_table_walks_every_public_constructor_and_every_keyword(tmp_path: Path) -> None:
    constructed = {name for name in acp_client.__all__ if not _made_by_the_sdk(name, getattr(acp_client, name))}
    assert constructed <= set(MAKERS), f"public classes missing from the table: {constructed - set(MAKERS)}"
    covered = {(name, keyword) for name, keyword, _ in BAD}
    missing = {
        (name, keyword)
        for name in MAKERS
        for keyword in _keywords(name, tmp_path)
        if (name, keyword) not in covered
        and (name, keyword) not in WIRING
        and (TWINS.get(name), keyword) not in covered
    }
    assert not missing, f"keywords without a bad value in the table: {sorted(missing)}"


def test_workspace_takes_the_documented_policy_names(tmp_path: Path) -> None:
    from acp_client.handlers import allow_reads, deny

    assert Workspace([tmp_path], permission="deny").permission is deny
    assert Workspace([tmp_path], permission="allow_reads").permission is allow_reads

