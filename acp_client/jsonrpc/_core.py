"""Sans-I/O JSON-RPC 2.0: text frames in, events out; calls in, text frames out.

Nothing here does I/O, awaits, or raises on bad input: a malformed frame is an :class:`Invalid` event
that a driver can count, log, and answer with the frame in ``Invalid.reply`` when JSON-RPC asks for one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic_core import from_json
from pydantic_core import to_json as _to_json

__all__ = [
    "DEFAULT_MAX_FRAME_CHARS",
    "ErrorResponse",
    "Event",
    "Invalid",
    "InvalidKind",
    "JsonRpcCore",
    "Notification",
    "Pending",
    "Request",
    "RequestId",
    "Response",
    "decode",
    "encode",
]

RequestId: TypeAlias = int | str | None

#: Default bound on one inbound text frame, in characters (16 MiB of ASCII).
DEFAULT_MAX_FRAME_CHARS = 16 * 1024 * 1024

InvalidKind = Literal[
    "parse_error",  # not JSON at all (answered with -32700, id null)
    "invalid_request",  # JSON, but not a JSON-RPC message (answered with -32600 when it could be a request)
    "empty_batch",  # "[]" (answered with -32600, id null)
    "unknown_id",  # a response to an id we never sent or already settled (counted, not answered)
    "oversize",  # longer than the configured bound (counted; answered with -32600, id null)
]

_JSONRPC = "2.0"


@dataclass(frozen=True, slots=True)
class Request:
    """The peer asks us something and expects a response with the same ``id``."""

    id: int | str
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    """The peer tells us something; it expects no response."""

    method: str
    params: Any

    def __init__(self, method: str, params: Any) -> None:
        # One per streamed update: set through the slot descriptors. A frozen dataclass's generated
        # __init__ goes through object.__setattr__, which costs about twice as much.
        _NOTIFICATION_METHOD(self, method)
        _NOTIFICATION_PARAMS(self, params)


_NOTIFICATION_METHOD = Notification.__dict__["method"].__set__
_NOTIFICATION_PARAMS = Notification.__dict__["params"].__set__


@dataclass(frozen=True, slots=True)
class Pending:
    """What the core remembers of a request we sent, until its response arrives or it is dropped."""

    id: int
    method: str


@dataclass(frozen=True, slots=True)
class Response:
    """A successful answer to one of our requests; ``request`` is the pending entry it settled."""

    id: int
    result: Any
    request: Pending


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error answer to one of our requests.

    ``request`` is ``None`` when the error carries ``id: null`` (the peer could not read our frame), so it
    settles nothing.
    """

    id: RequestId
    code: int
    message: str
    data: Any
    request: Pending | None


@dataclass(frozen=True, slots=True)
class Invalid:
    """A frame or batch entry that could not be used.

    ``reply`` is the error frame JSON-RPC says to send back, or ``None`` when nothing must be answered.
    ``excerpt`` is at most 200 characters of the offending input, for debug logs.
    """

    kind: InvalidKind
    detail: str
    excerpt: str = ""
    reply: str | None = None
    id: RequestId = None


Event: TypeAlias = Request | Notification | Response | ErrorResponse | Invalid


#: What ``params`` may be (a tuple: ``dict | list`` would build a union object on every message).
_PARAMS_TYPES = (dict, list)


def _loads_keys(text: str) -> Any:
    """JSON text -> Python objects. pydantic_core's parser caches decoded strings; caching the *values* of a
    stream of updates (every chunk text is new) costs more than it saves, so only keys are cached. (A
    function, not a ``functools.partial``: calling the partial costs more than this frame.)"""
    return from_json(text, cache_strings="keys")


def decode(text: str) -> Any:
    """The JSON value of ``text``, read as :class:`JsonRpcCore` reads frames; ``ValueError`` for anything it
    cannot read (not JSON, nested too deep, not valid Unicode), never ``RecursionError``."""
    try:
        return from_json(text, cache_strings="keys")  # as _loads_keys does, one call less (one per frame)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    except TypeError as exc:  # a lone surrogate (see JsonRpcCore.receive_one)
        raise ValueError("text is not valid Unicode") from exc


#: the reference encoder: one for every frame (``json.dumps`` with options builds a new one per call)
_ENCODE: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def encode(message: dict[str, Any]) -> str:
    """Serialise one message to a compact single-line JSON text (valid for newline-delimited stdio).

    Written by pydantic-core's serializer, about four times faster than the standard library's encoder
    (two requests per recovered session, thousands per round); for plain JSON values the text parses to
    what ``json`` writes. What pydantic-core cannot write goes to ``json``, whose answer or error stands: a
    type neither knows (``TypeError``), a lone surrogate. A non-finite float is refused with ``ValueError``,
    as ``json`` with ``allow_nan=False`` refuses it. Values ``json`` refused but pydantic-core knows (a set,
    ``bytes``, a date, a pydantic model, a non-string key) are written in pydantic-core's JSON form."""
    try:
        text = _to_json(message, inf_nan_mode="constants", serialize_unknown=False)
    except ValueError:  # (PydanticSerializationError) an unknown type or a lone surrogate: json decides
        return _ENCODE(message)
    if b"NaN" in text or b"Infinity" in text:
        return _ENCODE(message)  # a non-finite float (or a string holding the word): json decides
    return text.decode()


def _error_frame(id_: RequestId, code: int, message: str, data: Any = None) -> str:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return encode({"jsonrpc": _JSONRPC, "id": id_, "error": err})


def _excerpt(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "…"


def _valid_id(value: Any) -> bool:
    # bool is an int subclass but not a valid id
    return value is None or (isinstance(value, int | str) and not isinstance(value, bool))


@dataclass(slots=True)
class JsonRpcCore:
    """One connection's JSON-RPC state: outbound id allocation and the table of our pending requests.

    The two id spaces of a bidirectional connection are kept apart: ids we allocate live in the pending
    table; ids the peer sends us are only echoed back by :meth:`respond` / :meth:`respond_error`.
    """

    max_frame_chars: int = DEFAULT_MAX_FRAME_CHARS
    accept_batches: bool = True
    _next_id: int = 0
    _pending: dict[int, Pending] = field(default_factory=dict)
    _loads: Callable[[str], Any] = field(default=_loads_keys)

    # ------------------------------------------------------------------ outbound

    def request(self, method: str, params: Any = None) -> tuple[int, str]:
        """Allocate an id for a request, remember it as pending, and return ``(id, frame)``."""
        id_ = self._next_id
        self._next_id += 1
        self._pending[id_] = Pending(id_, method)
        msg: dict[str, Any] = {"jsonrpc": _JSONRPC, "id": id_, "method": method}
        if params is not None:
            msg["params"] = params
        return id_, encode(msg)

    def notification(self, method: str, params: Any = None) -> str:
        """A notification frame (no id, no response expected)."""
        msg: dict[str, Any] = {"jsonrpc": _JSONRPC, "method": method}
        if params is not None:
            msg["params"] = params
        return encode(msg)

    def respond(self, id_: int | str, result: Any) -> str:
        """A success response to a request the peer sent us."""
        return encode({"jsonrpc": _JSONRPC, "id": id_, "result": result})

    def respond_error(self, id_: RequestId, code: int, message: str, data: Any = None) -> str:
        """An error response to a request the peer sent us."""
        return _error_frame(id_, code, message, data)

    # ------------------------------------------------------------------ pending table

    @property
    def pending(self) -> dict[int, Pending]:
        """A copy of the pending table (id → what we asked)."""
        return dict(self._pending)

    def forget(self, id_: int) -> Pending | None:
        """Drop a pending request (its caller gave up); a late response for it becomes ``unknown_id``."""
        return self._pending.pop(id_, None)

    def drop_all(self) -> list[Pending]:
        """Drop every pending request (the connection died) and return them so their callers can fail."""
        dropped = list(self._pending.values())
        self._pending.clear()
        return dropped

    # ------------------------------------------------------------------ inbound

    def receive(self, text: str) -> list[Event]:
        """Turn one inbound text frame into events. Never raises for any input string."""
        return list(self.iter_receive(text))

    def iter_receive(self, text: str) -> Iterator[Event]:
        """Like :meth:`receive`, yielding events one at a time."""
        events = self.receive_one(text)
        if isinstance(events, list):
            yield from events
        else:
            yield events

    def receive_one(self, text: str) -> Event | list[Event]:
        """Like :meth:`receive`, but a frame holding one message (the usual case) gives its event itself and
        only a batch gives a list (no list or generator per frame on the hot path). Never raises."""
        if len(text) > self.max_frame_chars:
            return Invalid(
                "oversize",
                f"frame of {len(text)} characters exceeds the bound of {self.max_frame_chars}",
                _excerpt(text),
                _error_frame(None, -32600, "Invalid request", {"reason": "frame too large"}),
            )
        try:
            obj = self._loads(text)
        except ValueError as exc:
            return Invalid("parse_error", str(exc), _excerpt(text), _error_frame(None, -32700, "Parse error"))
        except RecursionError:
            return Invalid("parse_error", "nesting too deep", _excerpt(text), _error_frame(None, -32700, "Parse error"))
        except TypeError:
            # pydantic_core raises TypeError (not ValueError) for a str it cannot encode as UTF-8, i.e. one
            # holding a lone surrogate (a transport decoding with errors="surrogateescape" produces them).
            return Invalid(
                "parse_error",
                "text is not valid Unicode (lone surrogate)",
                _excerpt(text.encode("utf-8", "backslashreplace").decode("utf-8")),
                _error_frame(None, -32700, "Parse error"),
            )
        if type(obj) is dict:
            return self._message(obj)
        if isinstance(obj, list):
            if not self.accept_batches:
                return Invalid("invalid_request", "batches are not accepted", _excerpt(text))
            if not obj:
                return Invalid(
                    "empty_batch", "empty batch", _excerpt(text), _error_frame(None, -32600, "Invalid request")
                )
            return [self._message(entry) for entry in obj]
        return self._message(obj)

    def receive_decoded(self, text: str, obj: object) -> Event | list[Event]:
        """Like :meth:`receive_one` for ``text`` that a transport already decoded to ``obj`` with
        :func:`decode`: the same checks and events, without decoding it a second time."""
        if type(obj) is not dict or len(text) > self.max_frame_chars:
            return self.receive_one(text)  # a batch, or the oversize answer: the general path
        return self._message(obj)

    def receive_notification(self, text: str, obj: object) -> tuple[str, Any] | None:
        """For ``text`` already decoded to ``obj`` (as for :meth:`receive_decoded`): the ``(method, params)``
        of the :class:`Notification` that :meth:`receive_decoded` gives when the frame is a well-formed
        notification, without making that object (a stream of updates is one notification per frame);
        ``None`` for anything else (ask :meth:`receive_decoded` then)."""
        if type(obj) is dict and len(text) <= self.max_frame_chars:
            method = obj.get("method")
            if type(method) is str and "id" not in obj and obj.get("jsonrpc") == _JSONRPC:
                params = obj.get("params")
                if params is None or isinstance(params, _PARAMS_TYPES):
                    return method, params
        return None

    def _message(self, obj: Any) -> Event:
        if not isinstance(obj, dict):
            return Invalid(
                "invalid_request",
                f"a message must be an object, got {type(obj).__name__}",
                _excerpt(repr(obj)),
                _error_frame(None, -32600, "Invalid request"),
            )
        if obj.get("jsonrpc") != _JSONRPC:
            return self._invalid_envelope(obj, "missing or wrong 'jsonrpc' member")
        method = obj.get("method")
        has_id = "id" in obj
        id_ = obj.get("id")
        if method is not None:
            if not isinstance(method, str):
                return self._invalid_envelope(obj, "'method' must be a string")
            params = obj.get("params")
            if params is not None and not isinstance(params, _PARAMS_TYPES):
                return self._invalid_envelope(obj, "'params' must be an object or array")
            if not has_id:
                return Notification(method, params)
            if id_ is None or not _valid_id(id_):
                return self._invalid_envelope(obj, "a request id must be an integer or a string")
            return Request(id_, method, params)
        # a response
        if not has_id or not _valid_id(id_):
            return self._invalid_envelope(obj, "neither a request nor a response")
        has_result = "result" in obj
        has_error = "error" in obj
        if has_result == has_error:
            return Invalid(
                "invalid_request",
                "a response needs exactly one of 'result' and 'error'",
                _excerpt(encode_safe(obj)),
                id=id_,
            )
        if has_error:
            err = obj["error"]
            if not isinstance(err, dict):
                return Invalid("invalid_request", "'error' must be an object", _excerpt(encode_safe(obj)), id=id_)
            code = err.get("code")
            message = err.get("message")
            if not isinstance(code, int) or isinstance(code, bool):
                return Invalid("invalid_request", "error 'code' must be an integer", _excerpt(encode_safe(obj)), id=id_)
            if not isinstance(message, str):
                message = "" if message is None else str(message)
            pending = self._settle(id_)
            if pending is None and id_ is not None:
                return Invalid(
                    "unknown_id", f"error response for unknown id {id_!r}", _excerpt(encode_safe(obj)), id=id_
                )
            return ErrorResponse(id_, code, message, err.get("data"), pending)
        pending = self._settle(id_)
        if pending is None:
            return Invalid("unknown_id", f"response for unknown id {id_!r}", _excerpt(encode_safe(obj)), id=id_)
        return Response(pending.id, obj["result"], pending)

    def _settle(self, id_: RequestId) -> Pending | None:
        if isinstance(id_, int) and not isinstance(id_, bool):
            return self._pending.pop(id_, None)
        return None

    def _invalid_envelope(self, obj: dict[str, Any], detail: str) -> Invalid:
        id_ = obj.get("id")
        reply_id = id_ if _valid_id(id_) else None
        # Never answer a broken response (anything with an id, result or error but no method): an answer
        # echoing its id could settle an unrelated request of the peer. Everything else is an invalid
        # request and gets -32600, e.g. {"foo": "boo"} in the JSON-RPC 2.0 spec's batch example.
        looks_like_response = "method" not in obj and ("id" in obj or "result" in obj or "error" in obj)
        reply = None if looks_like_response else _error_frame(reply_id, -32600, "Invalid request")
        return Invalid("invalid_request", detail, _excerpt(encode_safe(obj)), reply, reply_id)


def encode_safe(obj: Any) -> str:
    """Best-effort JSON text of an already-parsed value, for excerpts in logs."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(obj)[:200]
