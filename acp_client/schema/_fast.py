"""Fast-path validators: the same models, validated without the Python-level forward-compatibility hooks.

Hand-written (never generated). The lenient machinery of :mod:`acp_client.schema._base` (the
``LenientModel`` wrap validator, ``skip_invalid_items``, the ``tag_discriminator`` callables and
``TaggedModel.model_post_init``) costs a Python call per nested model, list and union on *every* message, but
only changes the outcome of a message that is malformed somewhere. :func:`fast_validator` derives, from a
type's pydantic core schema, a validator with none of those hooks that is *stricter* than the lenient one:

* the ``LenientModel`` wrap validator is dropped (a malformed lenient field fails instead of being dropped);
  an unknown key spelled like a field's attribute name whose alias differs (the case
  ``_unmark_shadowing_extras`` repairs) fails too;
* ``skip_invalid_items`` is dropped (any bad item fails the list);
* a ``tag_discriminator`` union becomes a plain tagged union on the wire key without the ``...Other``
  variant (an unknown or missing tag fails);
* ``TaggedModel.model_post_init`` is dropped and the tag fields become required (a tag that is present in
  the input is already marked as set, which is all the hook did);
* a smart (non-tagged) union is left exactly as it is, lenient members included: which member a smart union
  picks depends on which members succeed, so it must see the lenient members.

Hence: whenever the fast validator *succeeds*, the lenient validator succeeds on the first attempt of every
hook, with the same instances, field values, ``model_fields_set`` and extras. Callers (see
:func:`fast_then_lenient`) try the fast validator first and, on any ``ValidationError``, run the ordinary
lenient validator on the same input, so results and errors are exactly those of the lenient path.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import CoreSchema, PydanticCustomError, SchemaValidator

from acp_client.schema._base import OTHER_TAG, LenientModel, TaggedModel, skip_invalid_items, tag_discriminator_key

__all__ = ["fast_schema", "fast_then_lenient", "fast_validator"]

_FAST_SUFFIX: Final = "#acp-fast"

#: Keys of a core schema dict whose value maps names (field names, tag values) to schemas.
_NAMED_CHILDREN: Final = frozenset({"fields", "choices"})

#: Keys of a core schema dict whose values are never schemas (values, callables, names, configs).
_NOT_SCHEMA_KEYS: Final = frozenset(
    {
        "cls",
        "config",
        "default",
        "default_factory",
        "expected",
        "function",
        "metadata",
        "ref",
        "schema_ref",
        "serialization",
        "discriminator",
        "post_init",
        "custom_error_context",
    }
)


class _Unsupported(Exception):
    """A schema the fast form cannot express (the caller then uses the lenient validator alone)."""


def _is_lenient_wrap(node: dict[str, Any]) -> bool:
    func = node.get("function", {}).get("function")
    return getattr(func, "__func__", None) is LenientModel._acp_default_on_error.__func__ or func is skip_invalid_items


class _Normalizer:
    """Hoists every schema carrying a ``ref`` into one flat map (inline occurrences become definition-refs)."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def walk(self, node: dict[str, Any]) -> dict[str, Any]:
        out = _map_children(node, self.walk)
        if out.get("type") == "definitions":  # its definitions were hoisted while walking them
            root: dict[str, Any] = out["schema"]
            return root
        ref = out.get("ref")
        if isinstance(ref, str) and "type" in out and out["type"] != "definition-ref":
            self.defs[ref] = out
            return {"type": "definition-ref", "schema_ref": ref}
        return out


def _map_children(node: dict[str, Any], fn: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """A copy of the schema ``node`` with ``fn`` applied to every direct child schema."""

    def sub(value: Any) -> Any:
        if isinstance(value, dict):
            return fn(value)
        if isinstance(value, list):
            return [sub(item) for item in value]
        if isinstance(value, tuple):
            return tuple(sub(item) for item in value)
        return value

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NOT_SCHEMA_KEYS:
            out[key] = value
        elif key in _NAMED_CHILDREN and isinstance(value, dict):  # keys are field names / tag values
            out[key] = {name: sub(child) for name, child in value.items()}
        else:
            out[key] = sub(value)
    return out


def _refs_in(node: dict[str, Any]) -> set[str]:
    """Every ``schema_ref`` under ``node``."""
    refs: set[str] = set()

    def visit(item: dict[str, Any]) -> dict[str, Any]:
        if item.get("type") == "definition-ref":
            refs.add(item["schema_ref"])
        _map_children(item, visit)
        return item

    visit(node)
    return refs


def _shadow_names(cls: type[BaseModel]) -> frozenset[str]:
    """Attribute names of ``cls`` whose wire alias differs (an unknown key spelled so must fall back)."""
    return frozenset(name for name, info in cls.model_fields.items() if info.alias is not None and info.alias != name)


def _reject_keys(names: frozenset[str]) -> Callable[[Any], Any]:
    def check(key: Any) -> Any:
        if key in names:
            raise PydanticCustomError("acp_fast_shadow", "unknown key shadows a field name")
        return key

    return check


class _Fast:
    """Rewrites normalized schemas into their fast form (definition-refs point to the fast definitions)."""

    def __init__(self, defs: dict[str, dict[str, Any]]) -> None:
        self.orig = defs
        self.out: dict[str, dict[str, Any]] = {}
        self.pending: list[str] = []
        self.orig_needed: set[str] = set()

    def need(self, ref: str) -> str:
        fast_ref = ref + _FAST_SUFFIX
        if fast_ref not in self.out and ref not in self.pending:
            self.pending.append(ref)
        return fast_ref

    def run(self, root: dict[str, Any]) -> dict[str, Any]:
        fast_root = self.walk(root)
        while self.pending:
            ref = self.pending.pop()
            fast_ref = ref + _FAST_SUFFIX
            if fast_ref in self.out:
                continue
            node = self.walk(self.orig[ref])
            node["ref"] = fast_ref
            self.out[fast_ref] = node
        # original definitions that preserved (smart-union) subtrees reach
        todo = list(self.orig_needed)
        keep: dict[str, dict[str, Any]] = {}
        while todo:
            ref = todo.pop()
            if ref in keep:
                continue
            keep[ref] = self.orig[ref]
            todo.extend(_refs_in(self.orig[ref]))
        return {"type": "definitions", "schema": fast_root, "definitions": [*self.out.values(), *keep.values()]}

    def walk(self, node: dict[str, Any], lenient_cls: type[BaseModel] | None = None) -> dict[str, Any]:
        kind = node.get("type")
        if kind == "definition-ref":
            return {**node, "schema_ref": self.need(node["schema_ref"])}
        if kind == "function-wrap":
            if not _is_lenient_wrap(node):  # someone else's wrap validator may depend on inner failures
                return self.keep(node)
            inner = node["schema"]
            cls = inner.get("cls") if inner.get("type") == "model" else None
            result = self.walk(inner, cls)
            if "ref" in node:
                result = {**result, "ref": node["ref"]}
            return result
        if kind == "union":  # smart union: which member wins depends on which succeed, so keep it lenient
            return self.keep(node)
        if kind == "tagged-union" and callable(node.get("discriminator")):
            key = tag_discriminator_key(node["discriminator"])
            if key is None:  # some other callable discriminator
                return self.keep(node)
            out = {k: v for k, v in node.items() if k != "choices"}
            out["choices"] = {tag: self.walk(choice) for tag, choice in node["choices"].items() if tag != OTHER_TAG}
            out["discriminator"] = key
            return out
        if kind == "model":
            return self._model(node, lenient_cls)
        return _map_children(node, self.walk)

    def keep(self, node: dict[str, Any]) -> dict[str, Any]:
        """``node`` exactly as the lenient path has it (its refs point to the original definitions)."""
        self.orig_needed.update(_refs_in(node))
        return node

    def _model(self, node: dict[str, Any], lenient_cls: type[BaseModel] | None) -> dict[str, Any]:
        cls = node["cls"]
        out = dict(node)
        fields_schema = dict(node["schema"])
        tags: tuple[str, ...] = ()
        if (
            node.get("post_init") == "model_post_init"
            and isinstance(cls, type)
            and issubclass(cls, TaggedModel)
            and cls.model_post_init is TaggedModel.model_post_init
        ):
            del out["post_init"]
            tags = cls.__acp_tags__
        if fields_schema.get("type") != "model-fields":
            out["schema"] = self.walk(fields_schema)
            return out
        fields: dict[str, Any] = {}
        for name, field in fields_schema["fields"].items():
            field = dict(field)
            inner = field["schema"]
            if name in tags and inner.get("type") == "default":
                inner = inner["schema"]  # the tag must be present: then it is in fields_set already
            field["schema"] = self.walk(inner)
            fields[name] = field
        fields_schema["fields"] = fields
        for key in ("extras_schema", "extras_keys_schema"):
            if key in fields_schema:
                fields_schema[key] = self.walk(fields_schema[key])
        shadow = _shadow_names(lenient_cls) if lenient_cls is not None else frozenset()
        if shadow:
            if "extras_keys_schema" in fields_schema:
                raise _Unsupported(f"{node['cls']!r} already validates its extra keys")
            fields_schema["extras_keys_schema"] = {
                "type": "function-plain",
                "function": {"type": "no-info", "function": _reject_keys(shadow)},
            }
        out["schema"] = fields_schema
        return out


def fast_schema(schema: CoreSchema) -> CoreSchema:
    """The fast (hook-free, stricter) form of a core schema; see the module docstring."""
    normalizer = _Normalizer()
    root = normalizer.walk(dict(schema))
    fast: Any = _Fast(normalizer.defs).run(root)
    result: CoreSchema = fast
    return result


def fast_validator(tp: Any) -> SchemaValidator:
    """A :class:`SchemaValidator` for ``tp`` (a model class or any type) without the lenient hooks."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        schema = tp.__pydantic_core_schema__
    else:
        schema = TypeAdapter(tp).core_schema
    return SchemaValidator(fast_schema(schema))


def fast_then_lenient(tp: Any) -> Callable[[Any], Any]:
    """Validate (by wire name only) with the fast validator, falling back to the ordinary one on any error.

    The result, or the ``ValidationError`` raised, is exactly what the ordinary validator gives.
    """
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        lenient = tp.__pydantic_validator__
    else:
        lenient = TypeAdapter(tp).validator
    try:
        fast = fast_validator(tp)
    except _Unsupported:
        return partial(lenient.validate_python, by_name=False)
    fast_validate = fast.validate_python
    lenient_validate = lenient.validate_python

    def validate(obj: Any) -> Any:
        try:
            return fast_validate(obj, by_name=False)
        except ValidationError:
            return lenient_validate(obj, by_name=False)

    return validate
