#!/usr/bin/env python3
"""Generate ``acp_client/schema/_generated/{v1,v2}.py`` from the vendored ACP JSON schemas.

Usage::

    python scripts/generate_schema.py               # rewrite the committed modules
    python scripts/generate_schema.py --out DIR     # write them somewhere else (the drift test does this)
    python scripts/generate_schema.py --check       # exit 1 if the committed modules are stale

Input: ``acp_client/schema/_json/v{1,2}/schema.unstable.json`` (byte-for-byte copies of the ``schema/`` folder
of the npm package ``@agentclientprotocol/sdk``, put there by ``scripts/sync_schema.py``; the unstable schema is
a superset of the stable one) and ``_json/SOURCE.json`` (their provenance).

This is a small purpose-built JSON-Schema -> pydantic v2 emitter, not a general one: it understands exactly the
shapes the ACP schemas use (objects, string/integer enums, tagged unions with optional default and ``other``
variants, objects carrying a tagged union, plain unions, aliases) and the ACP extension keywords
``x-deserialize-default-on-error`` and ``x-deserialize-skip-invalid-items``. It fails loudly on anything else,
so a schema update that needs a new rule cannot slip through silently. Output is deterministic (schema order,
no timestamps) and depends only on the standard library.

The semantics (DefaultOnError, skip-invalid-items, open unions, open enums) live in the hand-written runtime
``acp_client/schema/_base.py``; the generated code only declares classes against it.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import keyword
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "acp_client" / "schema" / "_json"
DEFAULT_OUT = ROOT / "acp_client" / "schema" / "_generated"
GENERATOR_VERSION = "1"

SOURCES = {1: "v1/schema.unstable.json", 2: "v2/schema.unstable.json"}
PROVENANCE = SCHEMA_DIR / "SOURCE.json"  # where the vendored files came from (written by sync_schema.py)

# JSON-RPC envelope unions: routing is done by method name in the connection layer (see METHODS instead).
SKIP_DEFS = frozenset(
    {"AgentRequest", "AgentResponse", "AgentNotification", "ClientRequest", "ClientResponse", "ClientNotification"}
)

_META_SCHEMA = {
    "description": "The _meta property is reserved by ACP to allow clients and agents to attach additional\n"
    "metadata to their interactions. Implementations MUST NOT make assumptions about values at\nthese keys.",
    "type": ["object", "null"],
    "x-deserialize-default-on-error": True,
    "additionalProperties": True,
}

# Overlay: what the session/status RFD (rfd/session-status.txt, revision 2026-10-26) adds to both schemas,
# planned upstream behind the `unstable_session_status` feature flag. Only the capability marker is generated;
# the request/response models are hand-written in acp_client/schema/status.py.
_STATUS_CAPS = {
    "description": "**UNSTABLE** (session/status RFD, not yet in the upstream schema)\n\n"
    "Capability marker for `session/status`: an empty object with optional `_meta`.\n"
    "Present and non-null means the agent supports `session/status`.",
    "type": "object",
    "properties": {"_meta": _META_SCHEMA},
}
_STATUS_PROP = {
    "description": "**UNSTABLE** (session/status RFD overlay)\n\nWhether the agent supports `session/status`.\n\n"
    "Optional. Omitted or `null` both mean the agent does not advertise support.",
    "anyOf": [{"$ref": "#/$defs/SessionStatusCapabilities"}, {"type": "null"}],
    "x-deserialize-default-on-error": True,
}


def apply_overlay(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the session/status capability marker (see ``_STATUS_CAPS``) to a copy of ``schema``."""
    schema = copy.deepcopy(schema)
    defs = schema["$defs"]
    if "SessionStatusCapabilities" in defs:  # upstream caught up: generate what it says
        return schema
    defs["SessionStatusCapabilities"] = _STATUS_CAPS
    defs["SessionCapabilities"]["properties"]["status"] = _STATUS_PROP
    return schema


# --------------------------------------------------------------------------- naming


def pascal(value: str) -> str:
    """``agent_message_chunk`` -> ``AgentMessageChunk``; ``_custom`` -> ``Custom``."""
    parts = re.split(r"[^A-Za-z0-9]+", value)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


_BASEMODEL_ATTRS = frozenset(
    {
        "construct",
        "copy",
        "dict",
        "json",
        "schema",
        "schema_json",
        "validate",
        "fields",
        "parse_obj",
        "parse_raw",
        "parse_file",
        "from_orm",
        "update_forward_refs",
        "to_wire",
    }
)


def attr_name(wire: str) -> str:
    """The Python attribute for a wire key: snake_case, ``_meta`` -> ``field_meta``, keywords get ``_``."""
    if wire == "_meta":
        return "field_meta"
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", wire)
    name = re.sub(r"[^A-Za-z0-9_]", "_", name).lower().lstrip("_")
    if not name or name[0].isdigit():
        name = "field_" + name
    if keyword.iskeyword(name) or name in _BASEMODEL_ATTRS or name.startswith("model_"):
        name += "_"
    return name


def docstring(text: str, indent: str) -> list[str]:
    """A safe triple-quoted docstring block for ``text``."""
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text += " "
    lines = text.split("\n")
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    out = [f'{indent}"""{lines[0]}']
    out += [(indent + line) if line.strip() else "" for line in lines[1:]]
    out.append(f'{indent}"""')
    return out


def ref_name(s: dict[str, Any]) -> str | None:
    """The ``$defs`` name behind ``{"$ref": ...}`` or ``{"allOf": [{"$ref": ...}]}``."""
    if "$ref" in s:
        return str(s["$ref"]).rsplit("/", 1)[-1]
    all_of = s.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


# --------------------------------------------------------------------------- intermediate form


@dataclass
class Prop:
    """One field of a generated class."""

    wire: str
    attr: str
    ann: str
    required: bool
    lenient: bool
    skip_invalid: bool
    is_list: bool
    default: str | None  # Python source of the default, or None for "no default" (required)
    doc: str | None


@dataclass
class ClassDef:
    """One generated model class."""

    name: str
    doc: str
    bases: list[str]  # generated parent classes
    props: list[Prop]
    tags: list[tuple[str, str, str]] = field(default_factory=list)  # (wire, attr, value) this class adds
    all_props: dict[str, Prop] = field(default_factory=dict)  # own + inherited, by wire key
    all_tags: list[str] = field(default_factory=list)  # tag attrs own + inherited


@dataclass
class UnionDef:
    """A discriminated union alias: members are (tag, python type name)."""

    name: str
    doc: str
    wire: str
    attr: str
    members: list[tuple[str, str]]
    default: str | None
    null_is_default: bool = False  # a `null` (or malformed) tag also selects the default variant


class GenerationError(Exception):
    """The schema uses a shape this emitter does not know."""


# --------------------------------------------------------------------------- the emitter


class Emitter:
    """Turns one ACP schema into the source of one Python module."""

    def __init__(
        self, schema: dict[str, Any], version: int, source_name: str, source_sha: str, origin: str = "upstream"
    ) -> None:
        self.schema = schema
        self.origin = origin
        self.defs: dict[str, dict[str, Any]] = schema["$defs"]
        self.version = version
        self.source_name = source_name
        self.source_sha = source_sha
        self.kind: dict[str, str] = {}
        self.classes: dict[str, ClassDef] = {}
        self.unions: dict[str, UnionDef] = {}
        self.plain_unions: dict[str, tuple[str, str]] = {}  # name -> (annotation, doc)
        self.aliases: dict[str, tuple[str, str]] = {}  # name -> (annotation, doc)
        self.enums: dict[
            str, tuple[str, list[tuple[Any, str | None, str | None]], str]
        ] = {}  # name -> (base, members, doc)
        self.union_variants: dict[str, dict[str, str]] = {}
        for name, s in self.defs.items():
            self.kind[name] = self.classify(name, s)

    # ----------------------------------------------------------------- classification

    @staticmethod
    def variants_of(s: dict[str, Any]) -> list[dict[str, Any]] | None:
        v = s.get("oneOf", s.get("anyOf"))
        return v if isinstance(v, list) else None

    def classify(self, name: str, s: dict[str, Any]) -> str:
        if name in SKIP_DEFS:
            return "skip"
        variants = self.variants_of(s)
        if s.get("type") == "object":
            if variants is None:
                return "object"
            return "object_tagged" if self.tag_key(variants) else "object_merged"
        if variants is not None:
            if all(v.get("type") == "string" for v in variants) and any("const" in v for v in variants):
                return "str_enum"
            if all(v.get("type") == "integer" for v in variants) and any("const" in v for v in variants):
                return "int_enum"
            if self.tag_key(variants):
                return "tagged"
            return "plain_union"
        if "type" in s:
            return "alias"
        if ref_name(s) is not None and not s.get("properties"):
            return "ref_alias"  # `allOf: [{$ref: X}]` alone: the same shape under another name (proxy/initialize)
        if not {k for k in s if not k.startswith("x-")} - {"description", "title"}:
            return "any"
        raise GenerationError(f"{name}: unknown shape {sorted(s)}")

    @staticmethod
    def variant_tag(v: dict[str, Any]) -> tuple[str, str] | None:
        """``(wire key, const value)`` of a tagged variant."""
        for key, ps in (v.get("properties") or {}).items():
            if isinstance(ps, dict) and isinstance(ps.get("const"), str) and key in v.get("required", []):
                return key, ps["const"]
        return None

    def tag_key(self, variants: list[dict[str, Any]]) -> str | None:
        """The common tag key of a union, or ``None`` if it is not a tagged union."""
        keys = {t[0] for v in variants if (t := self.variant_tag(v))}
        if len(keys) != 1:
            return None
        return next(iter(keys))

    # ----------------------------------------------------------------- annotations

    def ref_ann(self, name: str) -> str:
        kind = self.kind[name]
        if kind == "str_enum":
            return "str"
        if kind == "int_enum":
            return "int"
        if kind in ("any", "skip"):
            return "Any"
        if kind == "ref_alias" and name not in self.classes:
            return self.ref_ann(str(ref_name(self.defs[name])))
        return name

    def ann(self, s: dict[str, Any]) -> str:
        """The Python annotation for a property schema."""
        ref = ref_name(s)
        if ref is not None:
            return self.ref_ann(ref)
        variants = self.variants_of(s)
        if variants is not None:
            parts: list[str] = []
            for v in variants:
                part = self.ann(v)
                if part not in parts:
                    parts.append(part)
            if "Any" in parts:
                return "Any"
            parts.sort(key=lambda p: p == "None")
            return " | ".join(parts)
        t = s.get("type")
        if isinstance(t, list):
            parts = []
            for one in t:
                part = self.ann({**s, "type": one})
                if part not in parts:
                    parts.append(part)
            parts.sort(key=lambda p: p == "None")
            return " | ".join(parts)
        if "const" in s:
            return f"Literal[{s['const']!r}]"
        constraints: list[str] = []
        if t == "string":
            base = "str"
            if "minLength" in s:
                constraints.append(f"min_length={s['minLength']}")
            if "pattern" in s:
                constraints.append(f"pattern={s['pattern']!r}")
        elif t == "integer":
            base = "int"
            if "minimum" in s:
                constraints.append(f"ge={s['minimum']}")
            if "maximum" in s:
                constraints.append(f"le={s['maximum']}")
        elif t == "number":
            base = "float"
        elif t == "boolean":
            base = "bool"
        elif t == "null":
            return "None"
        elif t == "array":
            items = s.get("items")
            base = f"list[{self.ann(items) if isinstance(items, dict) else 'Any'}]"
            if "minItems" in s:
                constraints.append(f"min_length={s['minItems']}")
        elif t == "object":
            ap = s.get("additionalProperties")
            if isinstance(ap, dict) and ap:
                return f"dict[str, {self.ann(ap)}]"
            return "dict[str, Any]"
        elif t is None:
            return "Any"
        else:
            raise GenerationError(f"unknown type {t!r}")
        if constraints:
            return f"Annotated[{base}, Field({', '.join(constraints)})]"
        return base

    # ----------------------------------------------------------------- properties

    def prop(self, wire: str, s: dict[str, Any], required: bool, owner: str) -> Prop:
        ann = self.ann(s)
        lenient = bool(s.get("x-deserialize-default-on-error"))
        skip = bool(s.get("x-deserialize-skip-invalid-items"))
        target = self.defs.get(ref_name(s) or "", {})
        raw_type = s.get("type")
        types: list[Any] = raw_type if isinstance(raw_type, list) else [raw_type]
        is_list = "array" in types or target.get("type") == "array"
        if required and lenient and not is_list:
            raise GenerationError(f"{owner}.{wire}: required default-on-error field that is not a list")
        if skip and "list[" not in ann:
            raise GenerationError(f"{owner}.{wire}: skip-invalid-items on a non-list")
        if not required and ann != "Any" and "None" not in ann.split(" | "):
            ann = f"{ann} | None"
        if skip:
            ann = f"Annotated[{ann}, WrapValidator(skip_invalid_items)]"
        default: str | None = None
        if not required:
            default = self.default_source(s, ann)
        return Prop(
            wire=wire,
            attr=attr_name(wire),
            ann=ann,
            required=required,
            lenient=lenient,
            skip_invalid=skip,
            is_list=is_list,
            default=default,
            doc=s.get("description"),
        )

    def default_source(self, s: dict[str, Any], ann: str) -> str:
        """Python source for a field default: the schema default when it is simple, else ``None``."""
        if "default" not in s:
            return "None"
        value = s["default"]
        if isinstance(value, bool | int | float | str) or value is None:
            return repr(value)
        if value == []:
            return "Field(default_factory=list)"
        ref = ref_name(s)
        if isinstance(value, dict) and ref is not None and self.kind.get(ref) == "object":
            if not value:
                return f"Field(default_factory=lambda: {ref}())"
            return f"Field(default_factory=lambda: {ref}.model_validate({value!r}))"
        if value == {}:
            return "Field(default_factory=dict)"
        raise GenerationError(f"unsupported default {value!r} for {ann}")

    def props_of(self, owner: str, s: dict[str, Any], *, skip: str | None = None) -> list[Prop]:
        required = set(s.get("required", []))
        out = []
        for wire, ps in (s.get("properties") or {}).items():
            if wire == skip:
                continue
            out.append(self.prop(wire, ps, wire in required, owner))
        return out

    # ----------------------------------------------------------------- building

    def add_class(self, cls: ClassDef) -> None:
        shadows_def = cls.name in self.defs and self.kind[cls.name] not in ("object", "object_merged", "ref_alias")
        if cls.name in self.classes or shadows_def:
            raise GenerationError(f"class name collision: {cls.name}")
        merged: dict[str, Prop] = {}
        tags: list[str] = []
        for base in cls.bases:
            merged.update(self.classes[base].all_props)
            tags += [t for t in self.classes[base].all_tags if t not in tags]
        for p in cls.props:
            merged[p.wire] = p
        for _, attr, _ in cls.tags:
            if attr not in tags:
                tags.append(attr)
        cls.all_props = merged
        cls.all_tags = tags
        self.classes[cls.name] = cls

    def build(self) -> None:
        # objects first (variants inherit from them), in schema order
        for name, s in self.defs.items():
            kind = self.kind[name]
            if kind == "object":
                self.add_class(ClassDef(name, s.get("description", name), [], self.props_of(name, s)))
            elif kind == "object_merged":
                props = self.props_of(name, s)
                seen = {p.wire for p in props}
                for v in self.variants_of(s) or []:
                    vref = ref_name(v)
                    target = self.defs[vref] if vref else v
                    for p in self.props_of(name, {**target, "required": []}):
                        if p.wire not in seen:
                            seen.add(p.wire)
                            props.append(p)
                doc = s.get("description", name) + (
                    "\n\nThe schema's alternatives (scopes) are merged into optional fields here."
                )
                self.add_class(ClassDef(name, doc, [], props))
        for name, s in self.defs.items():  # a new name for an object: a subclass without fields of its own
            target = ref_name(s) if self.kind[name] == "ref_alias" else None
            if target is not None and self.kind[target] in ("object", "object_merged"):
                self.add_class(ClassDef(name, s.get("description", name), [target], []))
        for name, s in self.defs.items():
            kind = self.kind[name]
            if kind == "ref_alias" and name not in self.classes:
                self.aliases[name] = (self.ref_ann(name), s.get("description", name))
            if kind in ("tagged", "object_tagged"):
                if name not in self.unions:  # a nested use may have built it already
                    self.build_union(name, s)
            elif kind in ("str_enum", "int_enum"):
                variants = self.variants_of(s) or []
                # str members are named after their value, int members (error codes) after their title
                members = [
                    (v["const"], v.get("description") or v.get("title"), v.get("title"))
                    for v in variants
                    if "const" in v
                ]
                base = "StrEnum" if kind == "str_enum" else "IntEnum"
                self.enums[name] = (base, members, s.get("description", name))
            elif kind == "plain_union":
                body = {k: v for k, v in s.items() if k != "description"}
                self.plain_unions[name] = (self.ann(body), s.get("description", name))
            elif kind == "alias":
                self.aliases[name] = (self.ann(s), s.get("description", name))
            elif kind == "any":
                self.aliases[name] = ("Any", s.get("description", name))

    def build_union(self, name: str, s: dict[str, Any], prefix: list[tuple[str, str, str]] | None = None) -> str:
        """Build the variant classes and the union alias for ``name``; returns the alias name.

        ``prefix`` carries outer tags when this union is nested as one variant of another union
        (v2 ``SessionUpdate`` ``state_update`` -> ``StateUpdate``): every variant class then also carries them.
        """
        prefix = prefix or []
        alias = name
        variants = self.variants_of(s) or []
        wire = self.tag_key(variants)
        assert wire is not None
        attr = attr_name(wire)
        common: str | None = None
        if s.get("type") == "object" and s.get("properties"):
            common = f"{name}Common"
            if common not in self.classes:
                self.add_class(
                    ClassDef(
                        common,
                        f"Fields shared by every variant of :data:`{name}`.",
                        [],
                        self.props_of(name, s),
                    )
                )
        members: list[tuple[str, str]] = []
        default: str | None = None
        null_is_default = False
        other_done = False
        for v in variants:
            tag = self.variant_tag(v)
            ref = ref_name(v)
            if tag is None and (v.get("properties") or {}).get(wire) == {"type": "null"}:
                # the "none" variant (v2 idle `stopReason`): the tag omitted, `null` or malformed
                if default is not None or ref is not None:
                    raise GenerationError(f"{name}: unsupported null-tag variant {v.get('title')}")
                default = str(v.get("title") or "none")
                null_is_default = True
                cls_name = f"{name}{pascal(default)}"
                doc = v.get("description") or cls_name
                inline = self.props_of(name, v, skip=wire)
                self.add_variant_class(cls_name, doc, [common] if common else [], inline, prefix, [])
                members.append((default, cls_name))
                continue
            if tag is None and (
                v.get("title") in ("other", "unknown") or (wire in (v.get("properties") or {}) and ref is None)
            ):
                cls_name = f"{name}Other"
                props = [self.prop(wire, {"type": "string"}, True, cls_name)]
                props += self.props_of(cls_name, v, skip=wire)
                doc = v.get("description", "Custom or future variant.")
                doc += "\n\nThe payload is kept raw: unknown fields stay in ``model_extra`` and dump again."
                self.add_variant_class(cls_name, doc, [common] if common else [], props, prefix, [])
                members.append(("__other__", cls_name))
                other_done = True
                continue
            if tag is None:
                # default variant: selected when the tag is missing; no tag field of its own
                if default is not None or (ref is not None and self.kind[ref] != "object"):
                    raise GenerationError(f"{name}: unsupported untagged variant {v.get('title')}")
                default = str(v.get("title") or pascal(ref or "default"))
                inline = self.props_of(name, v)
                if ref is not None and not inline and not common and not prefix:
                    members.append((default, ref))
                    continue
                cls_name = f"{name}{pascal(default)}"
                doc = v.get("description") or (self.defs[ref].get("description") if ref else None) or cls_name
                bases = ([common] if common else []) + ([ref] if ref else [])
                self.add_variant_class(cls_name, doc, bases, inline, prefix, [])
                members.append((default, cls_name))
                continue
            _, value = tag
            cls_name = f"{name}{pascal(value)}"
            if cls_name in self.defs:  # e.g. AuthMethod + "terminal" vs the AuthMethodTerminal payload
                cls_name += "Variant"
            doc = v.get("description") or (self.defs[ref].get("description") if ref else None) or cls_name
            bases = [common] if common else []
            own_tags = [(wire, attr, value)]
            if ref is not None and self.kind[ref] in ("tagged", "object_tagged"):
                # nested union: every inner variant also carries this tag
                nested = self.build_union_nested(cls_name, ref, prefix + own_tags)
                members.append((value, nested))
                continue
            if ref is not None:
                if self.kind[ref] not in ("object", "object_merged"):
                    raise GenerationError(f"{name}.{value}: variant refers to {self.kind[ref]} {ref}")
                bases.append(ref)
            props = self.props_of(cls_name, v, skip=wire)
            self.add_variant_class(cls_name, doc, bases, props, prefix + own_tags, [])
            members.append((value, cls_name))
        if not other_done:
            cls_name = f"{name}Other"
            doc = (
                f"A variant of :data:`{name}` this schema version does not know (its ``{wire}`` value is new).\n\n"
                "The payload is kept raw: unknown fields stay in ``model_extra`` and dump again."
            )
            props = [self.prop(wire, {"type": "string"}, True, cls_name)]
            self.add_variant_class(cls_name, doc, [common] if common else [], props, prefix, [])
            members.append(("__other__", cls_name))
        self.unions[alias] = UnionDef(alias, s.get("description", name), wire, attr, members, default, null_is_default)
        self.union_variants[alias] = dict(members)
        return alias

    def build_union_nested(self, outer_cls: str, ref: str, tags: list[tuple[str, str, str]]) -> str:
        """A copy of union ``ref`` whose variants also carry the outer ``tags``; returns its alias name.

        ``ref`` is a ``$defs`` name or an already built union; a member that is itself a union (v2
        ``session/update`` ``state_update`` -> ``StateUpdate`` ``idle`` -> ``IdleStateUpdate``) is copied the same way.
        """
        # build the plain inner union first so its classes exist as bases
        if ref not in self.unions:
            self.build_union(ref, self.defs[ref])
        inner = self.unions[ref]
        members: list[tuple[str, str]] = []
        for tag_value, member in inner.members:
            cls_name = f"{outer_cls}{member[len(ref) :] if member.startswith(ref) else member}"
            if member in self.unions:
                members.append((tag_value, self.build_union_nested(cls_name, member, tags)))
                continue
            doc = self.classes[member].doc
            self.add_variant_class(cls_name, doc, [member], [], tags, [])
            members.append((tag_value, cls_name))
        self.unions[outer_cls] = UnionDef(
            outer_cls,
            f"The ``{tags[-1][2]}`` variant: one of the :data:`{ref}` variants.",
            inner.wire,
            inner.attr,
            members,
            inner.default,
            inner.null_is_default,
        )
        self.union_variants[outer_cls] = dict(members)
        return outer_cls

    def add_variant_class(
        self,
        name: str,
        doc: str,
        bases: list[str],
        props: list[Prop],
        tags: list[tuple[str, str, str]],
        _unused: list[str],
    ) -> None:
        tag_props = [
            Prop(wire, attr, f"Literal[{value!r}]", False, False, False, False, repr(value), None)
            for wire, attr, value in tags
        ]
        self.add_class(ClassDef(name, doc, list(bases), tag_props + props, tags=list(tags)))

    # ----------------------------------------------------------------- rendering

    def class_order(self) -> list[str]:
        done: list[str] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            for b in self.classes[n].bases:
                visit(b)
            done.append(n)

        for n in self.classes:
            visit(n)
        return done

    def render_class(self, cls: ClassDef) -> list[str]:
        lenient = {p.wire: p for p in cls.all_props.values() if p.lenient}
        bases: list[str] = []
        if cls.all_tags and not any(self.classes[b].all_tags for b in cls.bases):
            bases.append("TaggedModel")
        bases += cls.bases
        parent_lenient = any(any(p.lenient for p in self.classes[b].all_props.values()) for b in cls.bases)
        if lenient and not parent_lenient:
            bases.append("LenientModel")
        if not bases:
            bases.append("AcpModel")
        out = [f"class {cls.name}({', '.join(bases)}):"]
        out += docstring(cls.doc, "    ")
        body: list[str] = []
        if lenient:
            entries = []
            for wire, p in lenient.items():
                repl = "[]" if p.required else "DROP"
                entries.append(f"{wire!r}: {repl}")
                if p.attr != wire:
                    entries.append(f"{p.attr!r}: {repl}")
            body.append(f"    __acp_lenient__: ClassVar[Mapping[str, Any]] = {{{', '.join(entries)}}}")
        if cls.all_tags:
            body.append(f"    __acp_tags__: ClassVar[tuple[str, ...]] = {tuple(cls.all_tags)!r}")
        for p in cls.props:
            if p.default is None:
                value = f" = Field(alias={p.wire!r})" if p.attr != p.wire else ""
            elif p.default.startswith("Field("):
                value = " = " + (p.default[:-1] + f", alias={p.wire!r})" if p.attr != p.wire else p.default)
            else:
                value = f" = Field(default={p.default}, alias={p.wire!r})" if p.attr != p.wire else f" = {p.default}"
            body.append(f"    {p.attr}: {p.ann}{value}")
            if p.doc:
                body += docstring(p.doc, "    ")
        if body:
            out.append("")
            out += body
        return out

    def render(self) -> str:
        self.build()
        out: list[str] = [
            f'"""ACP protocol v{self.version} models, GENERATED by scripts/generate_schema.py -- DO NOT EDIT.',
            "",
            f"Source: acp_client/schema/_json/{self.source_name} (sha256 {self.source_sha}),",
            f"a byte-for-byte copy of the schema shipped in {self.origin}",
            "(see _json/UPSTREAM.md). Where a schema lacks ``SessionStatusCapabilities``, the session/status RFD",
            "overlay adds it (and the ``status`` marker on ``SessionCapabilities``).",
            "",
            "Enum-like types are ``StrEnum``/``IntEnum`` constants; fields that hold them are typed ``str``/``int``",
            "so unknown (future or ``_custom``) values are kept as the raw value. Unions tagged by a discriminator",
            "are ``Annotated`` aliases; an unknown tag validates into the union's ``...Other`` class.",
            '"""',
            "",
            "# ruff: noqa",
            "from __future__ import annotations",
            "",
            "from collections.abc import Mapping",
            "from enum import IntEnum, StrEnum",
            "from typing import Annotated, Any, ClassVar, Literal, TypeAlias, Union",
            "",
            "from pydantic import Discriminator, Field, Tag, WrapValidator",
            "",
            "from acp_client.schema._base import (",
            "    DROP,",
            "    AcpModel,",
            "    LenientModel,",
            "    MethodSpec,",
            "    TaggedModel,",
            "    skip_invalid_items,",
            "    tag_discriminator,",
            ")",
            "",
            f"PROTOCOL_VERSION = {self.version}",
            '"""The protocol version these models describe."""',
            "",
        ]
        # enums
        for name, (base, members, doc) in self.enums.items():
            out += ["", f"class {name}({base}):"]
            out += docstring(doc + "\n\nOpen set: fields holding it are typed str/int and keep unknown values.", "    ")
            out.append("")
            used: set[str] = set()
            for value, mdoc, mtitle in members:
                if isinstance(value, str):
                    mname = attr_name(value).upper()
                else:
                    mname = attr_name(pascal(str(mtitle or ""))).upper() or f"CODE_{abs(value)}"
                mname = re.sub(r"[^A-Z0-9_]", "_", mname) or "EMPTY"
                if mname[0].isdigit():
                    mname = "V_" + mname
                while mname in used:
                    mname += "_"
                used.add(mname)
                out.append(f"    {mname} = {value!r}")
                if mdoc:
                    out += docstring(mdoc, "    ")
            out.append("")
        # simple aliases
        for name, (ann, doc) in self.aliases.items():
            out += ["", f"{name}: TypeAlias = {ann}"]
            out += docstring(doc, "")
        out.append("")
        # classes
        for name in self.class_order():
            out += ["", "", *self.render_class(self.classes[name])]
        out.append("")
        # unions (after classes), in dependency order
        for name in self.union_order():
            u = self.unions[name]
            known = sorted(t for t, _ in u.members if t != "__other__" and t != u.default)
            if u.default is not None:
                known.append(u.default)
                known.sort()
            member_src = ",\n".join(f"        Annotated[{m}, Tag({t!r})]" for t, m in u.members)
            disc = f"tag_discriminator({u.wire!r}, {u.attr!r}, frozenset({known!r})"
            disc += f", default={u.default!r}" if u.default else ""
            disc += ", null_is_default=True)" if u.null_is_default else ")"
            out += ["", f"{name}: TypeAlias = Annotated[", "    Union[", member_src + ","]
            out += ["    ],", f"    Discriminator({disc}),", "]"]
            other = next((m for t, m in u.members if t == "__other__"), None)
            out += docstring(f"{u.doc}\n\nTagged by ``{u.wire}``; an unknown tag validates into ``{other}``.", "")
        for name, (ann, doc) in self.plain_unions.items():
            out += ["", f"{name}: TypeAlias = {ann}"]
            out += docstring(doc, "")
        out += ["", ""]
        for name in self.class_order():
            out.append(f"{name}.model_rebuild()")
        out += ["", ""]
        # variant tables
        out.append("UNION_VARIANTS: dict[str, dict[str, Any]] = {")
        for name in sorted(self.union_variants):
            out.append(f"    {name!r}: {{")
            for tag, member in self.union_variants[name].items():
                out.append(f"        {tag!r}: {member},")
            out.append("    },")
        out.append("}")
        out.append('"""Per tagged union: tag value -> member type (``"__other__"`` is the unknown-tag fallback)."""')
        out += ["", ""]
        out += self.render_methods()
        out.append("")
        return "\n".join(out)

    def union_order(self) -> list[str]:
        done: list[str] = []

        def visit(n: str) -> None:
            if n in done:
                return
            for _, m in self.unions[n].members:
                if m in self.unions:
                    visit(m)
            done.append(n)

        for n in self.unions:
            visit(n)
        return done

    def render_methods(self) -> list[str]:
        table: dict[str, dict[str, str]] = {}
        for name, s in self.defs.items():
            method, side = s.get("x-method"), s.get("x-side")
            if not method:
                continue
            entry = table.setdefault(str(method), {"side": str(side)})
            if name.endswith("Response"):
                entry["result"] = name if name in self.classes else "None"
            elif name.endswith("Request") or ("params" not in entry and name.endswith("Notification")):
                entry["params"] = name if name in self.classes else "None"
        out = ["METHODS: dict[str, MethodSpec] = {"]
        for method in sorted(table):
            e = table[method]
            params, result = e.get("params", "None"), e.get("result", "None")
            out.append(f"    {method!r}: MethodSpec({method!r}, {e['side']!r}, {params}, {result}),")
        out.append("}")
        out.append('"""Every method of this version: who serves it, its params model and its result model."""')
        return out


def origin() -> str:
    """``package@version`` of the vendored files, from ``_json/SOURCE.json`` (written by sync_schema.py)."""
    meta = json.loads(PROVENANCE.read_text(encoding="utf-8"))
    return f"{meta['package']}@{meta['version']}"


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into ``out_dir``; returns the written paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    init = out_dir / "__init__.py"
    init.write_text(
        '"""Generated ACP models (``v1``, ``v2``); see scripts/generate_schema.py. DO NOT EDIT."""\n',
        encoding="utf-8",
    )
    written.append(init)
    for version, source in SOURCES.items():
        raw = (SCHEMA_DIR / source).read_bytes()
        schema = apply_overlay(json.loads(raw))
        code = Emitter(schema, version, source, hashlib.sha256(raw).hexdigest(), origin()).render()
        path = out_dir / f"v{version}.py"
        path.write_text(code, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--check", action="store_true", help="fail if the committed modules are stale")
    args = parser.parse_args(argv)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            stale = [
                p.name
                for p in generate(Path(tmp))
                if not (DEFAULT_OUT / p.name).exists() or (DEFAULT_OUT / p.name).read_bytes() != p.read_bytes()
            ]
        if stale:
            print(f"stale generated modules: {', '.join(stale)}; run scripts/generate_schema.py", file=sys.stderr)
            return 1
        return 0
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
