"""Runtime support shared by the generated modules and the hand-written models.

Hand-written (never generated). The generated modules ``_generated/v1.py`` and ``_generated/v2.py`` import
only this module, pydantic and the standard library.

Forward-compatibility rules implemented here (see ``docs/protocol.md`` §0 and design decision 6):

* every model keeps unknown fields (``extra="allow"``) and dumps them again;
* a field tagged ``x-deserialize-default-on-error`` degrades to *absent* when its value is malformed
  (:class:`LenientModel`); a required list tagged that way degrades to ``[]`` like Rust's ``Default``;
* a list tagged ``x-deserialize-skip-invalid-items`` drops the items that fail (:func:`skip_invalid_items`);
* a tagged union with an unknown tag value validates into its ``...Other`` class, which keeps the payload raw
  (:func:`tag_discriminator`); a *known* tag with a malformed required field is still an error.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidatorFunctionWrapHandler, model_validator

__all__ = [
    "DROP",
    "OMITTED",
    "OTHER_TAG",
    "AcpModel",
    "LenientModel",
    "MethodSpec",
    "PatchState",
    "TaggedModel",
    "patch_state",
    "patch_value",
    "skip_invalid_items",
    "tag_discriminator",
    "tag_discriminator_key",
]


class _Marker:
    """A named singleton marker (``repr`` is its name)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        return False


#: In a :attr:`LenientModel.__acp_lenient__` map: drop the malformed key (the field reads as unset).
DROP: Final[Any] = _Marker("DROP")

#: Returned by :func:`patch_value` for a patch field the update did not mention ("leave unchanged").
OMITTED: Final[Any] = _Marker("OMITTED")

#: The tag a :func:`tag_discriminator` returns for a tag value it does not know.
OTHER_TAG: Final = "__other__"


class AcpModel(BaseModel):
    """Base of every ACP model: camelCase aliases, unknown fields kept, strict JSON-like types.

    Parse with ``Model.model_validate(obj)`` (``obj`` already decoded from JSON); write with
    :meth:`to_wire`, which is ``model_dump(by_alias=True, exclude_unset=True, mode="json")``: it gives back
    exactly the keys that were received or set, under their wire names, unknown keys included.
    """

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        strict=True,
        protected_namespaces=(),
        arbitrary_types_allowed=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this model: wire names, only the fields that were received or set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class LenientModel(AcpModel):
    """A model with ``x-deserialize-default-on-error`` fields.

    ``__acp_lenient__`` maps a wire key (and its attribute name) to what replaces a malformed value:
    :data:`DROP` (the key is removed, the field reads as unset) or a replacement value (``[]`` for the few
    required lists). Validation runs once on the happy path; only when it fails are the offending lenient
    keys replaced and the object validated again. Errors in other fields, and a missing required field,
    still fail the message.
    """

    __acp_lenient__: ClassVar[Mapping[str, Any]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _acp_default_on_error(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            model = handler(data)
        except ValidationError as exc:
            if not isinstance(data, dict):
                raise
            fixed = _repair(cls.__acp_lenient__, data, exc)
            if fixed is None:
                raise
            data = fixed
            model = handler(fixed)
        if isinstance(model, BaseModel) and model.__pydantic_extra__ and isinstance(data, dict):
            _unmark_shadowing_extras(model, data)
        return model


def _unmark_shadowing_extras(model: BaseModel, data: dict[str, Any]) -> None:
    """An unknown wire key spelled like a field's attribute name (``updated_at``) must not mark that field set.

    pydantic lists extra keys in ``model_fields_set``; when such a key equals a field name whose wire alias was
    absent, the field would read as "sent as null" (a patch *clear*). Only runs when there are extras.
    """
    fields = type(model).model_fields
    extra = model.__pydantic_extra__ or {}
    for key in extra:
        info = fields.get(key)
        if info is not None and info.alias is not None and info.alias != key and info.alias not in data:
            model.__pydantic_fields_set__.discard(key)


def _repair(lenient: Mapping[str, Any], data: dict[str, Any], exc: ValidationError) -> dict[str, Any] | None:
    """A copy of ``data`` with the malformed lenient keys replaced, or ``None`` if an error is not lenient."""
    fixed: dict[str, Any] | None = None
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = err["loc"]
        key = loc[0] if loc else None
        if not isinstance(key, str) or key not in lenient or (len(loc) == 1 and err["type"] == "missing"):
            return None
        if fixed is None:
            fixed = dict(data)
        replacement = lenient[key]
        if replacement is DROP:
            fixed.pop(key, None)
        else:
            fixed[key] = copy.copy(replacement)
    return fixed


class TaggedModel(AcpModel):
    """A variant of a tagged union: its tag field is always part of the wire form.

    ``__acp_tags__`` names the tag attributes (two for a variant nested in another union, e.g. v2
    ``{"sessionUpdate": "state_update", "state": "idle"}``). Tags have defaults (so
    ``ContentBlockText(text="hi")`` works) and are marked as set, so :meth:`AcpModel.to_wire` always
    writes them.
    """

    __acp_tags__: ClassVar[tuple[str, ...]] = ()

    def model_post_init(self, context: Any, /) -> None:
        """Mark the tag fields as set (they are part of the wire form even when they took their default)."""
        self.__pydantic_fields_set__.update(self.__acp_tags__)


def tag_discriminator(
    wire_key: str, attr: str, known: frozenset[str], default: str | None = None, *, null_is_default: bool = False
) -> Callable[[Any], str | None]:
    """A pydantic ``Discriminator`` callable for a union tagged by ``wire_key``.

    Known tag values select their variant; a missing tag selects ``default`` (a variant whose tag may be
    omitted, e.g. v1 ``McpServer`` stdio) or fails; any other string selects :data:`OTHER_TAG`, the variant
    that keeps the payload raw. With ``null_is_default`` (a tag the schema reads leniently, such as the v2 idle
    ``stopReason``) a ``null`` or non-string tag selects ``default`` too, as if it were omitted.
    """

    def discriminate(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(wire_key, _MISSING)
            if tag is _MISSING:
                tag = value.get(attr, _MISSING)
        else:
            tag = getattr(value, attr, _MISSING)
        if tag is _MISSING:
            return default
        if isinstance(tag, str):
            return tag if tag in known else OTHER_TAG
        return default if null_is_default else OTHER_TAG

    _DISCRIMINATOR_KEYS[discriminate] = wire_key
    return discriminate


_MISSING: Final[Any] = _Marker("MISSING")

#: The wire key of every callable :func:`tag_discriminator` made (for the fast path in ``_fast.py``).
_DISCRIMINATOR_KEYS: Final[dict[Callable[[Any], str | None], str]] = {}


def tag_discriminator_key(discriminator: Any) -> str | None:
    """The wire key of a callable made by :func:`tag_discriminator`, ``None`` for any other discriminator."""
    try:
        return _DISCRIMINATOR_KEYS.get(discriminator)
    except TypeError:  # unhashable
        return None


def skip_invalid_items(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Wrap validator for lists tagged ``x-deserialize-skip-invalid-items``: drop the items that fail."""
    try:
        return handler(value)
    except ValidationError as exc:
        if not isinstance(value, list):
            raise
        bad: set[int] = set()
        for err in exc.errors(include_url=False, include_context=False, include_input=False):
            loc = err["loc"]
            if not loc or not isinstance(loc[0], int):
                raise
            bad.add(loc[0])
        return handler([item for i, item in enumerate(value) if i not in bad])


PatchState = Literal["omitted", "null", "value"]


def patch_state(model: BaseModel, attr: str) -> PatchState:
    """How an update mentioned a patch field: ``"omitted"`` (unchanged), ``"null"`` (clear) or ``"value"``.

    A malformed value of a default-on-error field counts as omitted.
    """
    if attr not in type(model).model_fields:
        raise AttributeError(f"{type(model).__name__} has no field {attr!r}")
    if attr not in model.model_fields_set:
        return "omitted"
    return "null" if getattr(model, attr) is None else "value"


def patch_value(model: BaseModel, attr: str) -> Any:
    """The patch value of a field: :data:`OMITTED` when not mentioned, ``None`` to clear, else the value."""
    if patch_state(model, attr) == "omitted":
        return OMITTED
    return getattr(model, attr)


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One JSON-RPC method of a protocol version, from the schema's ``x-method`` / ``x-side`` tags.

    ``side`` is who serves it (``"agent"``, ``"client"``, ``"both"`` or ``"protocol"``); ``params`` and
    ``result`` are the model classes (``result`` is ``None`` for notifications).
    """

    method: str
    side: str
    params: type[BaseModel] | None
    result: type[BaseModel] | None
