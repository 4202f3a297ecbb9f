"""The fast validation path (``acp_client/schema/_fast.py``) gives exactly what the lenient validators give.

``parse_session_update`` validates with a hook-free, stricter validator first and falls back to the ordinary
(lenient) one on any error. These tests check the fast form really is hook-free on the hot kinds, that it
fails (so the lenient path decides) on every input the lenient hooks would change, and -- differentially, on
seeded random well-formed and mutated inputs for every model and union of both versions -- that results
(class, values, ``model_fields_set``, extras at every level) and errors are identical.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

from acp_client.exceptions import ProtocolError
from acp_client.schema import parse_session_update, v1, v2
from acp_client.schema._base import OTHER_TAG, tag_discriminator_key
from acp_client.schema._fast import fast_schema, fast_then_lenient, fast_validator
from acp_client.schema._parse import _DEFERRED


def _lenient(tp: Any) -> SchemaValidator:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__pydantic_validator__  # type: ignore[return-value]
    return TypeAdapter(tp).validator  # type: ignore[return-value]


def _core(tp: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__pydantic_core_schema__
    return TypeAdapter(tp).core_schema


def _same(a: Any, b: Any, path: str = "$") -> str | None:
    """``None`` when ``a`` and ``b`` are the same down to classes, fields_set and extras; else where they differ."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, BaseModel):
        if a.__pydantic_fields_set__ != b.__pydantic_fields_set__:
            return f"{path}: fields_set {a.__pydantic_fields_set__} vs {b.__pydantic_fields_set__}"
        if a.__pydantic_private__ != b.__pydantic_private__:
            return f"{path}: private"
        for attr in ("__dict__", "__pydantic_extra__"):
            da, db = getattr(a, attr), getattr(b, attr)
            if da is None or db is None:
                if da is not db:
                    return f"{path}: {attr}"
                continue
            if list(da) != list(db):
                return f"{path}: {attr} keys {list(da)} vs {list(db)}"
            for key in da:
                if (err := _same(da[key], db[key], f"{path}.{key}")) is not None:
                    return err
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if (err := _same(x, y, f"{path}[{i}]")) is not None:
                return err
        return None
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys"
        for key in a:
            if (err := _same(a[key], b[key], f"{path}.{key}")) is not None:
                return err
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def _outcome(validate: Any, obj: Any) -> tuple[str, Any]:
    try:
        return "ok", validate(copy.deepcopy(obj))
    except ValidationError as exc:
        return "error", (str(exc), exc.errors(include_url=False, include_context=False, include_input=False))


_BUILT: dict[int, tuple[Any, Any, Any]] = {}


def _check(tp: Any, obj: Any) -> bool:
    """Assert fast-then-lenient == lenient on ``obj``; return whether the fast validator alone accepted it."""
    if id(tp) not in _BUILT:
        _BUILT[id(tp)] = (_lenient(tp), fast_then_lenient(tp), fast_validator(tp))
    lenient, combined, fast = _BUILT[id(tp)]
    want = _outcome(lambda o: lenient.validate_python(o, by_name=False), obj)
    got = _outcome(combined, obj)
    fast_ok = _outcome(lambda o: fast.validate_python(o, by_name=False), obj)[0] == "ok"
    assert want[0] == got[0], (obj, want, got)
    if want[0] == "error":
        assert got[1] == want[1], obj
        assert not fast_ok, obj  # the fast form is never more permissive
    else:
        assert _same(want[1], got[1]) is None, (obj, _same(want[1], got[1]))
    return fast_ok


# --------------------------------------------------------------------------- hot kinds are hook-free


def _callables(schema: Any, *, skip_smart_unions: bool = False) -> Iterator[Any]:
    """Python callables the validator of ``schema`` would call (function validators, discriminators, post_init)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if skip_smart_unions and kind == "union":
                continue  # kept lenient on purpose (e.g. text-or-blob resource contents)
            if isinstance(kind, str) and kind.startswith("function-"):
                yield node["function"]["function"]
            if callable(node.get("discriminator")):
                yield node["discriminator"]
            if isinstance(node.get("post_init"), str):
                yield node["post_init"]
            stack.extend(v for k, v in node.items() if k not in ("metadata", "serialization", "function"))
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


@pytest.mark.parametrize("module", [v1, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("kind", ["agent_message_chunk", "agent_thought_chunk", "tool_call_update"])
def test_fast_form_of_hot_kinds_has_no_python_hooks(module: Any, kind: str) -> None:
    member = module.UNION_VARIANTS["SessionUpdate"][kind]
    fast = fast_schema(_core(member))
    assert fast["type"] == "definitions"
    # the original (lenient) definitions are kept only for the smart unions that still use them
    fast_defs = [d for d in fast["definitions"] if d["ref"].endswith("#acp-fast")]
    hooks = list(_callables([fast["schema"], fast_defs], skip_smart_unions=True))
    # only the key check for unknown keys spelled like an attribute name (runs for extras alone) remains
    assert all(getattr(h, "__name__", "") == "check" for h in hooks), hooks
    assert list(_callables(_core(member)))  # while the lenient schema has hooks


# --------------------------------------------------------------------------- targeted cases


def _chunk(version: int, **extra: Any) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    if version == 2:
        update["messageId"] = "m1"
    update.update(extra)
    return update


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(
    ("extra", "fast_ok"),
    [
        ({}, True),
        ({"brandNew": {"x": 1}}, True),
        ({"_meta": {"a": 1}}, True),
        ({"_meta": "not an object"}, False),  # default-on-error: dropped by the lenient path
        ({"message_id": "shadow"}, False),  # unknown key spelled like an attribute name
        ({"field_meta": {"a": 1}}, False),
        ({"session_update": "x"}, False),
        ({"content": {"type": "future_block", "x": 1}}, False),  # unknown tag -> ContentBlockOther
        ({"content": {"text": "no tag"}}, False),  # missing tag (no default variant): an error
        ({"content": {"type": "text", "text": "hi", "annotations": 5}}, False),
        ({"content": {"type": "text", "text": 5}}, False),  # a malformed required field: an error
        ({"content": {"type": "image", "data": "x", "mimeType": "image/png", "uri": 5}}, False),
    ],
)
def test_chunk_variants_agree_and_fast_path_only_takes_clean_input(
    version: int, extra: dict[str, Any], fast_ok: bool
) -> None:
    member = (v1 if version == 1 else v2).UNION_VARIANTS["SessionUpdate"]["agent_message_chunk"]
    assert _check(member, _chunk(version, **extra)) is fast_ok


@pytest.mark.parametrize("module", [v1, v2], ids=["v1", "v2"])
def test_tool_call_update_skip_invalid_items_and_patch_fields_agree(module: Any) -> None:
    member = module.UNION_VARIANTS["SessionUpdate"]["tool_call_update"]
    base = {"sessionUpdate": "tool_call_update", "toolCallId": "c1"}
    good_item = {"type": "content", "content": {"type": "text", "text": "out"}}
    assert _check(member, {**base, "status": "in_progress", "content": [good_item], "title": None})
    assert _check(member, {**base, "rawInput": {"a": [1]}, "locations": [{"path": "/a", "line": 1}]})
    assert not _check(member, {**base, "content": [good_item, {"type": "content"}, 7]})  # bad items dropped
    assert not _check(member, {**base, "locations": "nope"})  # default-on-error
    assert not _check(member, {**base, "content": [{"type": "future", "x": 1}]})  # unknown tag kept
    assert not _check(member, {**base, "toolCallId": 3})  # malformed required field: error
    assert not _check(member, {**base, "raw_input": 1})  # shadowing key


def test_nested_union_state_update_agrees() -> None:
    member = v2.UNION_VARIANTS["SessionUpdate"]["state_update"]
    assert _check(member, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})
    assert not _check(member, {"sessionUpdate": "state_update", "state": "future_state"})
    assert not _check(member, {"sessionUpdate": "state_update"})


@pytest.mark.parametrize("version", [1, 2])
def test_parse_session_update_results_and_errors_are_the_lenient_ones(version: int) -> None:
    module = v1 if version == 1 else v2
    member = module.UNION_VARIANTS["SessionUpdate"]["agent_message_chunk"]
    for update in (_chunk(version), _chunk(version, message_id="s", _meta=3, content={"type": "zz"})):
        event = parse_session_update({"sessionId": "s1", "update": update}, version)
        assert _same(event.update, member.model_validate(update, by_name=False)) is None
    bad = _chunk(version, content={"type": "text", "text": 5})
    with pytest.raises(ValidationError) as lenient_err:
        member.model_validate(bad, by_name=False)
    with pytest.raises(Exception, match="malformed session/update 'agent_message_chunk'") as err:
        parse_session_update({"sessionId": "s1", "update": bad}, version)
    assert str(lenient_err.value) in str(err.value)


# --------------------------------------------------------------------------- differential, seeded random


class _Gen:
    """Random instances of a core schema (valid by construction, except where the schema allows anything)."""

    def __init__(self, rnd: random.Random, schema: Any) -> None:
        self.rnd = rnd
        self.defs: dict[str, Any] = {}
        stack = [schema]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if "ref" in node and node.get("type") != "definition-ref":
                    self.defs[node["ref"]] = node
                skip = ("metadata", "serialization", "default", "cls", "function")
                stack.extend(v for k, v in node.items() if k not in skip)
            elif isinstance(node, (list, tuple)):
                stack.extend(node)

    def gen(self, s: dict[str, Any], depth: int = 0) -> Any:
        r, t = self.rnd, s["type"]
        if depth > 12:
            return None
        if t == "definitions":
            return self.gen(s["schema"], depth)
        if t == "definition-ref":
            return self.gen(self.defs[s["schema_ref"]], depth + 1)
        if t.startswith("function-") or t in ("model", "default"):
            return self.gen(s["schema"], depth + 1)
        if t == "model-fields":
            out = {}
            for name, f in s["fields"].items():
                if f["schema"]["type"] == "default" and r.random() < 0.4:
                    continue
                out[f.get("validation_alias", name)] = self.gen(f["schema"], depth + 1)
            return out
        if t == "nullable":
            return None if r.random() < 0.25 else self.gen(s["schema"], depth)
        simple: dict[str, list[Any]] = {
            "str": ["a", "text", "2024-01-01T00:00:00Z", "/p/x.py"],
            "int": [0, 1, 7, 50],
            "float": [0.5, 3.25],
            "bool": [True, False],
            "none": [None],
            "any": [1, "s", {"k": [1, 2]}, None, [True]],
        }
        if t in simple:
            return r.choice(simple[t])
        if t == "literal":
            return r.choice(s["expected"])
        if t == "list":
            return [self.gen(s["items_schema"], depth + 1) for _ in range(r.randint(0, 3))]
        if t == "dict":
            return {f"k{i}": self.gen(s.get("values_schema", {"type": "any"}), depth + 1) for i in range(2)}
        if t == "tagged-union":
            tag = r.choice([k for k in s["choices"] if k != OTHER_TAG])
            value = self.gen(s["choices"][tag], depth + 1)
            key = tag_discriminator_key(s["discriminator"])
            if isinstance(value, dict) and key is not None:
                value[key] = tag
            return value
        if t == "union":
            choice = r.choice(s["choices"])
            return self.gen(choice[0] if isinstance(choice, tuple) else choice, depth + 1)
        raise AssertionError(f"no generator for core schema type {t!r}")


_JUNK: list[Any] = [None, 1, -1, 2.5, True, "x", "", [], [1], {}, {"a": 1}, ["x"], {"type": "zzz"}]
_KEYS = ["message_id", "field_meta", "session_update", "tool_call_id", "raw_input", "zz", "_meta", "type", "mime_type"]


def _mutate(rnd: random.Random, value: Any) -> Any:
    value = copy.deepcopy(value)
    for _ in range(rnd.randint(1, 3)):
        nodes: list[tuple[tuple[Any, ...], Any]] = []
        stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
        while stack:
            path, node = stack.pop()
            nodes.append((path, node))
            if isinstance(node, dict):
                stack.extend(((*path, k), v) for k, v in node.items())
            elif isinstance(node, list):
                stack.extend(((*path, i), v) for i, v in enumerate(node))
        path, node = rnd.choice(nodes)
        op = rnd.random()
        if isinstance(node, dict) and op < 0.3:
            node[rnd.choice(_KEYS)] = copy.deepcopy(rnd.choice([*_JUNK, "v"]))
        elif isinstance(node, dict) and op < 0.5 and node:
            del node[rnd.choice(list(node))]
        elif isinstance(node, dict) and op < 0.6 and "type" in node:
            node["type"] = rnd.choice(["future", 3, None])
        elif path:
            parent = value
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = copy.deepcopy(rnd.choice(_JUNK))
    return value


def _targets() -> Iterator[Any]:
    for module in (v1, v2):
        tag = module.__name__.rsplit(".", 1)[1]
        for name in sorted(vars(module)):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == module.__name__:
                yield pytest.param(obj, id=f"{tag}.{name}")
        for union, variants in sorted(module.UNION_VARIANTS.items()):
            for kind, member in variants.items():
                if not (isinstance(member, type) and issubclass(member, BaseModel)):
                    yield pytest.param(member, id=f"{tag}.{union}[{kind}]")


@pytest.mark.parametrize("tp", list(_targets()))
def test_fast_then_lenient_equals_lenient_on_random_inputs(tp: Any) -> None:
    rnd = random.Random(f"acp-fast-{tp!r}")
    schema = _core(tp)
    gen = _Gen(rnd, schema)
    for i in range(24):
        base = gen.gen(schema)
        _check(tp, base if i % 3 == 0 else _mutate(rnd, base))


# ---------------------------------------------------------------------------------------------- lazy parsing

_LAZY_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
# keys that matter to the models: wire names, attribute names that shadow them, tags, unknown keys
_LAZY_KEYS = st.sampled_from(
    ["messageId", "message_id", "_meta", "field_meta", "content", "session_update", "annotations", "type", "text"]
) | st.text(max_size=6)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", ["user_message_chunk", "agent_message_chunk", "agent_thought_chunk"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outer=st.dictionaries(_LAZY_KEYS, _LAZY_VALUES, max_size=4),
    inner=st.dictionaries(_LAZY_KEYS, _LAZY_VALUES, max_size=4),
    text=st.text(max_size=8) | st.integers() | st.none(),
    message_id=st.text(max_size=4) | st.integers() | st.none(),
)
def test_lazy_parse_defers_only_updates_that_validate(
    version: int, kind: str, outer: dict[str, Any], inner: dict[str, Any], text: Any, message_id: Any
) -> None:
    # the cheap check behind lazy=True must imply that the validator succeeds, with the same model
    update = {**outer, "sessionUpdate": kind, "content": {**inner, "type": "text", "text": text}}
    if version == 2 or message_id is not None:
        update["messageId"] = message_id
    params = {"sessionId": "s1", "update": update}
    try:
        eager = parse_session_update(params, version)
    except ProtocolError:
        with pytest.raises(ProtocolError):  # rejected input is rejected at once, never deferred
            parse_session_update(params, version, lazy=True)
        return
    lazy = parse_session_update(params, version, lazy=True)
    assert _same(lazy.update, eager.update) is None


def test_lazy_parse_defers_a_text_chunk_and_builds_it_once() -> None:
    params = {"sessionId": "s1", "update": _chunk(2)}
    event = parse_session_update(params, 2, lazy=True)
    assert event._update is _DEFERRED
    model = event.update
    assert model is event.update
    assert _same(model, parse_session_update(params, 2).update) is None
    # anything else is validated at once, lazy or not
    bad = {"sessionId": "s1", "update": _chunk(2, content={"type": "text", "text": 5})}
    with pytest.raises(ProtocolError):
        parse_session_update(bad, 2, lazy=True)
    tool = {"sessionId": "s1", "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t"}}
    assert parse_session_update(tool, 2, lazy=True)._update is not _DEFERRED
