"""Parsing entry points the connection and client layers call: validate once, translate errors once.

Every function takes objects already decoded from JSON (``dict``/``list``/``str``...) and validates them once
with a model or a cached ``TypeAdapter``, by wire name only (``by_name=False``: a wire key that happens to equal
a Python attribute name, like ``session_id``, stays an unknown field). Malformed input raises
:class:`~acp_client.exceptions.ProtocolError` carrying the pydantic error text; no ``ValidationError`` leaks out.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ValidationError

from acp_client.exceptions import ProtocolError, UsageError
from acp_client.schema._base import OTHER_TAG, MethodSpec
from acp_client.schema._fast import fast_then_lenient
from acp_client.schema.prompt import PromptAnswer
from acp_client.schema.status import SessionStatusResponse, StateSnapshot

if TYPE_CHECKING:
    from acp_client.schema._generated import v1, v2

__all__ = [
    "STATUS_CAPABILITY_PATH",
    "SessionUpdateEvent",
    "UnknownUpdate",
    "capability_present",
    "models_for",
    "parse_initialize_response",
    "parse_params",
    "parse_prompt_answer",
    "parse_result",
    "parse_session_update",
    "parse_state_update",
    "parse_status_response",
    "session_update_fields",
    "status_supported",
    "supports_status",
    "update_fields",
]

#: The generated module of each protocol version, imported the first time it is needed (each takes a few
#: hundred milliseconds to import: a program pays only for the version it speaks).
_MODULE_NAMES: Final[dict[int, str]] = {1: "acp_client.schema._generated.v1", 2: "acp_client.schema._generated.v2"}


def models_for(version: int) -> ModuleType:
    """The generated module for a protocol version (``1`` -> :mod:`v1`, ``2`` -> :mod:`v2`), imported on
    first use."""
    name = _MODULE_NAMES.get(version) if isinstance(version, int) else None
    if name is None:
        raise UsageError(f"protocol version {version!r} has no models; this SDK speaks 1 and 2")
    return sys.modules.get(name) or importlib.import_module(name)


def _fail(what: str, exc: ValidationError) -> ProtocolError:
    """The :class:`ProtocolError` for a failed validation (raise it ``from exc``)."""
    return ProtocolError(f"malformed {what}: {exc}")


# --------------------------------------------------------------------------- session/update


@dataclass(frozen=True, slots=True)
class UnknownUpdate:
    """A ``session/update`` whose ``sessionUpdate`` kind this protocol version does not know.

    Kept raw, never rejected: ``raw`` is the ``update`` object exactly as received.
    """

    kind: str
    raw: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        """The update object as received."""
        return self.raw


class _Deferred:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<deferred>"


#: Marks an update model not built yet (see :class:`SessionUpdateEvent`).
_DEFERRED: Final = _Deferred()


class SessionUpdateEvent:
    """One parsed ``session/update`` notification.

    ``kind`` is the raw ``sessionUpdate`` string; ``update`` is the typed variant model for a known kind
    (e.g. ``v2.SessionUpdateAgentMessageChunk``) or an :class:`UnknownUpdate`; ``raw`` is the ``params``
    object as received.

    From :func:`parse_session_update` with ``lazy=True``, ``update`` of an update already known to be
    valid is built from ``raw["update"]`` the first time it is read (most consumers of a long stream read
    ``kind`` and ``raw`` only), then cached.
    """

    __slots__ = ("_update", "_version", "kind", "raw", "session_id")

    def __init__(self, session_id: str, kind: str, update: Any, raw: dict[str, Any], _version: int = 0) -> None:
        self.session_id = session_id
        self.kind = kind
        self._update = update  # _DEFERRED: built from raw["update"] as protocol _version on first read
        self.raw = raw
        self._version = _version

    @property
    def update(self) -> Any:
        """The typed model of the ``update`` object (or an :class:`UnknownUpdate`)."""
        update = self._update
        if update is _DEFERRED:
            update = self._update = _validate_update(self.kind, self.raw["update"], self._version)
        return update

    @property
    def is_known(self) -> bool:
        """Whether ``kind`` is a kind this protocol version defines."""
        return not isinstance(self.update, UnknownUpdate)

    @property
    def meta(self) -> dict[str, Any] | None:
        """The notification's ``_meta`` object, if it sent a valid one."""
        meta = self.raw.get("_meta")
        return meta if isinstance(meta, dict) else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionUpdateEvent):
            return NotImplemented
        return (self.session_id, self.kind, self.update, self.raw) == (
            other.session_id,
            other.kind,
            other.update,
            other.raw,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"SessionUpdateEvent(session_id={self.session_id!r}, kind={self.kind!r}, "
            f"update={self._update!r}, raw={self.raw!r})"
        )


def _update_validators(module: ModuleType) -> dict[str, Callable[[Any], Any]]:
    """Per ``sessionUpdate`` kind, the validator of that variant alone (no trial of union members).

    Each validator tries the hook-free fast form first and falls back to the ordinary lenient one on any
    error (:func:`~acp_client.schema._fast.fast_then_lenient`: same result, same errors). It is built the
    first time its kind arrives (the table starts with stubs that replace themselves).
    """
    table: dict[str, Callable[[Any], Any]] = {}

    def stub(kind: str, member: Any) -> Callable[[Any], Any]:
        def build_and_validate(obj: Any) -> Any:
            validate = table[kind] = fast_then_lenient(member)
            return validate(obj)

        return build_and_validate

    for kind, member in module.UNION_VARIANTS["SessionUpdate"].items():
        if kind != OTHER_TAG:
            table[kind] = stub(kind, member)
    return table


_UPDATE_VALIDATORS: Final[dict[int, dict[str, Callable[[Any], Any]]]] = {}


def _validators(version: int) -> dict[str, Callable[[Any], Any]]:
    table = _UPDATE_VALIDATORS.get(version)
    if table is None:
        table = _UPDATE_VALIDATORS[version] = _update_validators(models_for(version))
    return table


def _validate_update(kind: str, update: dict[str, Any], version: int) -> Any:
    try:
        return _validators(version)[kind](update)
    except ValidationError as exc:
        raise _fail(f"session/update {kind!r}", exc) from exc


_TEXT_CHUNK_KINDS: Final = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})


def parse_session_update(params: Any, version: int, *, lazy: bool = False) -> SessionUpdateEvent:
    """Parse the ``params`` of a ``session/update`` notification.

    Dispatches on the ``sessionUpdate`` string to that kind's cached validator. An unknown kind gives an
    :class:`UnknownUpdate`; a known kind with a malformed required field, or a missing ``sessionId`` /
    ``update`` / ``sessionUpdate``, raises :class:`ProtocolError`. With ``lazy=True`` an update that a
    cheap check proves valid (a text chunk of a message) is not validated now: its model is built when
    :attr:`SessionUpdateEvent.update` is first read; the outcome is the same.
    """
    return SessionUpdateEvent(*session_update_fields(params, version, lazy=lazy))


def session_update_fields(
    params: Any, version: int, *, lazy: bool = False
) -> tuple[str, str, Any, dict[str, Any], int]:
    """What :func:`parse_session_update` checks and finds, without the event object (a client applying a
    stream of updates builds its own item): ``(session_id, kind, update, params, version)``, where
    ``update`` is the typed model, an :class:`UnknownUpdate`, or (``lazy``) a marker that the model is to be
    built from ``params["update"]`` as protocol ``version`` when first read. Raises as it does."""
    _versioned(version)  # an unknown version is a usage error before any check of the input
    if not isinstance(params, dict):
        raise ProtocolError(f"session/update params must be an object, got {type(params).__name__}")
    session_id = params.get("sessionId")
    if not isinstance(session_id, str):
        raise ProtocolError("session/update params need a string sessionId")
    kind, update, version = update_fields(params.get("update"), version, lazy=lazy)
    return session_id, kind, update, params, version


def _versioned(version: int) -> dict[str, Callable[[Any], Any]]:
    validators = _UPDATE_VALIDATORS.get(version)
    if validators is None:
        if version not in _MODULE_NAMES:
            raise UsageError(f"protocol version {version!r} has no models; this SDK speaks 1 and 2")
        validators = _validators(version)
    return validators


def update_fields(update: Any, version: int, *, lazy: bool = False) -> tuple[str, Any, int]:
    """The checks of :func:`session_update_fields` for the ``update`` object alone (a caller that already
    read the envelope and the ``sessionId``): ``(kind, update, version)``, as there. Raises as it does."""
    validators = _UPDATE_VALIDATORS.get(version)
    if validators is None:
        validators = _versioned(version)
    if not isinstance(update, dict):
        raise ProtocolError("session/update params need an update object")
    kind = update.get("sessionUpdate")
    if lazy and type(kind) is str and kind in _TEXT_CHUNK_KINDS:  # a kind every version knows
        # A cheap check that implies validation succeeds: a message chunk whose content is a text block.
        # Its only required fields are ``content`` (a text block needs only a string ``text``) and, in v2, a
        # string ``messageId``; everything else is optional, default-on-error, or an unknown key that is
        # kept (tests/schema/test_schema_fast.py checks the implication against the validators). Failing the
        # check only means "validate now".
        content = update.get("content")
        if (
            type(content) is dict
            and content.get("type") == "text"
            and type(content.get("text")) is str
            and (version < 2 or type(update.get("messageId")) is str)
        ):
            return kind, _DEFERRED, version
    if not isinstance(kind, str):
        raise ProtocolError("session/update update needs a string sessionUpdate")
    validate = validators.get(kind)
    if validate is None:
        return kind, UnknownUpdate(kind, update), 0
    try:
        model = validate(update)
    except ValidationError as exc:
        raise _fail(f"session/update {kind!r}", exc) from exc
    return kind, model, 0


def parse_state_update(update: Any) -> StateSnapshot | None:
    """The foreground state of a v2 ``state_update`` session update, or ``None`` if it is malformed.

    Takes the flattened update object (``{"sessionUpdate": "state_update", "state": "idle", ...}``, the
    ``sessionUpdate`` key is optional), the whole ``session/update`` params object around it
    (``{"sessionId": ..., "update": {...}}``, i.e. :attr:`SessionUpdateEvent.raw`), or an already parsed
    ``v2.SessionUpdateStateUpdate*`` model.
    """
    if isinstance(update, BaseModel):
        update = update.model_dump(by_alias=True, exclude_unset=True)
    if not isinstance(update, dict):
        return None
    if "state" not in update and isinstance(update.get("update"), dict):
        update = update["update"]
    body = {k: v for k, v in update.items() if k != "sessionUpdate"}
    try:
        return StateSnapshot.model_validate(body, by_name=False)
    except ValidationError:
        return None


# --------------------------------------------------------------------------- responses


def build_status_models() -> None:
    """Build the ``session/status`` models now (once per process; later calls cost nothing). They are built
    lazily, and their schema reaches into the generated v2 models (``StateSnapshot.usage``), so the first
    status answer would otherwise import those on the event loop, in the middle of a probe."""
    if not SessionStatusResponse.__pydantic_complete__:
        SessionStatusResponse.model_rebuild()


def parse_status_response(result: Any, version: int) -> SessionStatusResponse:
    """Parse a ``session/status`` result.

    ``status`` is kept raw (any string). On v2 ``state`` is a :class:`StateSnapshot` or ``None`` (missing,
    null or malformed = not reported, never idle); on v1 ``state`` is not part of the protocol: it stays an
    unknown field (``model_extra``) and ``.state`` is ``None``. Raises :class:`ProtocolError` when the result is
    not an object or ``status`` is missing or not a string.
    """
    models_for(version)
    if not isinstance(result, dict):
        raise ProtocolError(f"session/status result must be an object, got {type(result).__name__}")
    if len(result) == 1:
        status = result.get("status")
        if type(status) is str:  # the common answer, {"status": "inactive"}: nothing else to validate
            return SessionStatusResponse.model_construct(status=status)
    if version == 1 and "state" in result:
        body = dict(result)
        ignored = body.pop("state")
        try:
            model = SessionStatusResponse.model_validate(body, by_name=False)
        except ValidationError as exc:
            raise _fail("session/status result", exc) from exc
        if model.__pydantic_extra__ is not None:
            model.__pydantic_extra__["state"] = ignored
        return model
    try:
        return SessionStatusResponse.model_validate(result, by_name=False)
    except ValidationError as exc:
        raise _fail("session/status result", exc) from exc


def parse_initialize_response(result: Any, version: int) -> v1.InitializeResponse | v2.InitializeResponse:
    """Parse an ``initialize`` result as the ``version`` the agent answered (``v1``/``v2.InitializeResponse``)."""
    module = models_for(version)
    if not isinstance(result, dict):
        raise ProtocolError(f"initialize result must be an object, got {type(result).__name__}")
    model_cls: type[v1.InitializeResponse] | type[v2.InitializeResponse] = module.InitializeResponse
    try:
        return model_cls.model_validate(result, by_name=False)
    except ValidationError as exc:
        raise _fail("initialize result", exc) from exc


def _spec(method: str, version: int) -> MethodSpec:
    spec: MethodSpec | None = models_for(version).METHODS.get(method)
    if spec is None:
        raise UsageError(f"{method!r} is not a protocol v{version} method")
    return spec


def parse_prompt_answer(result: Any) -> PromptAnswer:
    """Parse a ``session/prompt`` result of either version leniently (see :class:`PromptAnswer`): a v2
    receipt, the older ``{}``, or a v1 ``stopReason``. ``null`` reads as ``{}``; a non-object raises
    :class:`ProtocolError`."""
    if result is None:
        result = {}
    if not isinstance(result, dict):
        raise ProtocolError(f"session/prompt result must be an object, got {type(result).__name__}")
    try:
        return PromptAnswer.model_validate(result, by_name=False)
    except ValidationError as exc:
        raise _fail("session/prompt result", exc) from exc


def parse_result(method: str, result: Any, version: int) -> BaseModel:
    """Parse the result of request ``method`` with its schema model. ``null`` reads as ``{}``.

    (The stable v1 docs show ``"result": null`` for ``session/load``; accept it like ``{}``.) A v2
    ``session/prompt`` result is read by :func:`parse_prompt_answer`, which also accepts the shapes agents sent
    before the insertion receipt (``{}``, ``{"stopReason": ...}``).
    """
    if method == "session/prompt" and version >= 2:
        return parse_prompt_answer(result)
    spec = _spec(method, version)
    if spec.result is None:
        raise UsageError(f"{method!r} has no result model in protocol v{version}")
    if result is None:
        result = {}
    if not isinstance(result, dict):
        raise ProtocolError(f"{method} result must be an object, got {type(result).__name__}")
    try:
        return spec.result.model_validate(result, by_name=False)
    except ValidationError as exc:
        raise _fail(f"{method} result", exc) from exc


def parse_params(method: str, params: Any, version: int) -> BaseModel:
    """Parse the params of an incoming request or notification ``method`` with its schema model."""
    spec = _spec(method, version)
    if spec.params is None:
        raise UsageError(f"{method!r} has no params model in protocol v{version}")
    if not isinstance(params, dict):
        raise ProtocolError(f"{method} params must be an object, got {type(params).__name__}")
    try:
        return spec.params.model_validate(params, by_name=False)
    except ValidationError as exc:
        raise _fail(f"{method} params", exc) from exc


# --------------------------------------------------------------------------- capabilities

#: Where the ``session/status`` marker lives inside the agent capabilities object, per version.
STATUS_CAPABILITY_PATH: Final[Mapping[int, tuple[str, ...]]] = {
    1: ("sessionCapabilities", "status"),
    2: ("session", "status"),
}


def capability_present(raw: Any, path: tuple[str, ...]) -> bool:
    """The presence rule on a raw capabilities object: is the marker at ``path`` advertised?

    An object marker counts when present and non-null; a boolean (v1 ``loadSession``) counts when ``true``.
    Anything else -- missing, ``null``, ``false``, a malformed value, or a non-object on the way -- is
    "not supported" (capabilities omitted in ``initialize`` MUST be treated as unsupported).
    """
    node: Any = raw
    for key in path:
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return node is True or isinstance(node, dict)


def status_supported(agent_capabilities_raw: Any, version: int) -> bool:
    """Whether the agent advertised ``session/status``.

    ``agent_capabilities_raw`` is the raw ``agentCapabilities`` object (v1) or ``capabilities`` object (v2)
    of the ``initialize`` result.
    """
    path = STATUS_CAPABILITY_PATH.get(version)
    if path is None:
        models_for(version)
        return False
    return capability_present(agent_capabilities_raw, path)


def supports_status(caps: v1.AgentCapabilities | v2.AgentCapabilities | Mapping[str, Any] | None) -> bool:
    """Whether typed (or raw v1-or-v2) agent capabilities advertise ``session/status``."""
    if caps is None:
        return False
    # a model can only be an instance of a generated class if its module was imported
    loaded1, loaded2 = sys.modules.get(_MODULE_NAMES[1]), sys.modules.get(_MODULE_NAMES[2])
    if loaded1 is not None and isinstance(caps, loaded1.AgentCapabilities):
        session1 = caps.session_capabilities
        return session1 is not None and session1.status is not None
    if loaded2 is not None and isinstance(caps, loaded2.AgentCapabilities):
        session2 = caps.session
        return session2 is not None and session2.status is not None
    raw = dict(caps)
    return capability_present(raw, STATUS_CAPABILITY_PATH[1]) or capability_present(raw, STATUS_CAPABILITY_PATH[2])
