"""The error tree of acp_client.exceptions (docs: protocol.md §6, design.md decision 7)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp_client import exceptions as exc
from acp_client.exceptions import (
    ACPError,
    ACPTimeoutError,
    AuthRequired,
    ConnectionLost,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RequestCancelled,
    RPCError,
    SessionNotFound,
    rpc_error_from_object,
)

CODES: list[tuple[int, type[RPCError]]] = [
    (-32700, ParseError),
    (-32600, InvalidRequest),
    (-32601, MethodNotFound),
    (-32602, InvalidParams),
    (-32603, InternalError),
    (-32000, AuthRequired),
    (-32002, SessionNotFound),
    (-32800, RequestCancelled),
]


@pytest.mark.parametrize(("code", "cls"), CODES)
def test_each_acp_code_maps_to_its_subclass(code: int, cls: type[RPCError]) -> None:
    err = rpc_error_from_object(code, "msg", {"k": 1})
    assert type(err) is cls
    assert isinstance(err, RPCError) and isinstance(err, ACPError)
    assert (err.code, err.message, err.data) == (code, "msg", {"k": 1})
    assert cls.default_code == code
    assert str(err) == f"[{code}] msg"


@pytest.mark.parametrize("code", [0, 1, -1, -32001, -32003, -32099, -32604, -32801, 2**31 - 1, -(2**31)])
def test_unknown_codes_give_a_plain_rpc_error(code: int) -> None:
    err = rpc_error_from_object(code, "other", None)
    assert type(err) is RPCError
    assert err.code == code  # any integer round-trips (Other(i32))
    assert err.to_object() == {"code": code, "message": "other"}


def test_to_object_keeps_data_when_present() -> None:
    err = rpc_error_from_object(-32603, "Internal error", {"details": "boom"})
    assert err.to_object() == {"code": -32603, "message": "Internal error", "data": {"details": "boom"}}
    # falsy data that is not None is still data
    assert rpc_error_from_object(-32603, "m", 0).to_object()["data"] == 0
    assert rpc_error_from_object(-32603, "m", {}).to_object()["data"] == {}


def test_session_not_found_carries_the_session_id() -> None:
    err = rpc_error_from_object(-32002, "Resource not found", {"sessionId": "sess_abc123"})
    assert isinstance(err, SessionNotFound)
    assert err.session_id == "sess_abc123"
    assert err.data == {"sessionId": "sess_abc123"}


@pytest.mark.parametrize(
    "data",
    [
        None,
        {},
        {"uri": "sess_abc123"},  # what the official Python SDK's resource_not_found() helper sends
        {"sessionId": 42},
        {"sessionId": None},
        {"sessionId": ["sess_abc123"]},
        {"session_id": "sess_abc123"},
        "sess_abc123",
        ["sess_abc123"],
        7,
    ],
)
def test_session_not_found_without_a_usable_session_id(data: Any) -> None:
    err = rpc_error_from_object(-32002, "Resource not found", data)
    assert isinstance(err, SessionNotFound)
    assert err.session_id is None
    assert err.data == data


def test_session_not_found_can_be_built_directly() -> None:
    err = SessionNotFound(-32002, "gone", {"sessionId": "s"})
    assert err.session_id == "s"
    assert isinstance(err, RPCError)


def test_timeout_is_a_builtin_timeout_error() -> None:
    err = ACPTimeoutError("session/prompt timed out")
    assert isinstance(err, TimeoutError)
    assert isinstance(err, ACPError)
    with pytest.raises(TimeoutError):
        raise err
    # asyncio.TimeoutError is the builtin since 3.11, so asyncio users catch it too
    with pytest.raises(asyncio.TimeoutError):
        raise ACPTimeoutError("x")


def test_connection_lost_with_request_sent() -> None:
    original = ConnectionLost("socket closed", close_code=1006, reason="abnormal")
    assert original.request_sent is False
    sent = original.with_request_sent(True)
    assert type(sent) is ConnectionLost
    assert sent is not original
    assert sent.request_sent is True
    assert (sent.close_code, sent.reason, str(sent)) == (1006, "abnormal", "socket closed")
    assert original.request_sent is False  # the original is unchanged
    assert sent.with_request_sent(False).request_sent is False


def test_connection_lost_defaults() -> None:
    err = ConnectionLost()
    assert (err.request_sent, err.close_code, err.reason) == (False, None, None)
    assert str(err) == "the connection to the agent was lost"
    assert isinstance(err, exc.TransportError) and isinstance(err, ACPError)


def test_connection_lost_subclass_survives_with_request_sent() -> None:
    class ProcessExited(ConnectionLost):
        pass

    copy = ProcessExited("exit 1", close_code=1).with_request_sent(True)
    assert type(copy) is ProcessExited and copy.request_sent is True and copy.close_code == 1


def test_handshake_rejected() -> None:
    err = exc.HandshakeRejected(429, retry_after=2.5, headers={"Retry-After": "2.5"})
    assert isinstance(err, exc.ConnectError)
    assert err.status_code == 429 and err.retry_after == 2.5 and err.headers == {"Retry-After": "2.5"}
    assert "429" in str(err) and "2.5" in str(err)
    assert exc.HandshakeRejected(401).headers == {}


def test_every_public_error_derives_from_acp_error() -> None:
    for name in exc.__all__:
        obj = getattr(exc, name)
        if isinstance(obj, type):
            assert issubclass(obj, ACPError), name


def test_errors_name_their_public_module_and_survive_pickling() -> None:
    """The classes are defined in private modules; the public path is what reprs and pickles carry."""
    import pickle

    for name in exc.__all__:
        assert getattr(exc, name).__module__ == "acp_client.exceptions", name
    errors: list[ACPError] = [
        exc.SessionNotFound(-32002, "unknown session", {"sessionId": "s1"}),
        exc.ConnectionLost("gone", request_sent=True, close_code=1006, exit_code=-9, stderr_tail=("boom",)),
        exc.HTTPTransportError("bad answer", status_code=415, content_type="text/plain", body_excerpt="no"),
        exc.LeaseLost("s1", "taken", holder="w2", token=7),
        exc.ReconnectFailed("flapping", ValueError("x"), detail="5 in 60 s"),
    ]
    for error in errors:
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert {k: repr(v) for k, v in vars(again).items()} == {k: repr(v) for k, v in vars(error).items()}
