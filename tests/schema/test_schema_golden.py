"""Every golden vector of protocol.md §9 round-trips through the models.

Parse the message part with the model the client layer would use, dump it with ``to_wire()`` (by alias, unset
fields excluded) and compare with the input (dict equality, so key order does not matter). Vectors are copied
into ``tests/data/schema_golden_vectors.json``; ids of the §9.4 vectors carry ``-derived`` (INFERRED from the
rules, not spec text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_client.schema import (
    SessionStatusRequest,
    SessionUpdateEvent,
    UnknownUpdate,
    models_for,
    parse_initialize_response,
    parse_params,
    parse_result,
    parse_session_update,
    parse_status_response,
    status_supported,
)

_DATA = json.loads((Path(__file__).parents[1] / "data" / "schema_golden_vectors.json").read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = _DATA["vectors"]


def _cases(source: str) -> list[Any]:
    return [
        pytest.param(vec, version, id=f"{vec['id']}{'-derived' if source == 'derived' else ''}-v{version}")
        for vec in VECTORS
        if vec["source"] == source
        for version in vec["versions"]
    ]


def _parse(vec: dict[str, Any], version: int) -> list[tuple[Any, Any]]:
    """(input, dumped) pairs for every typed part of a vector."""
    msg = vec["message"]
    method = vec.get("method")
    pairs: list[tuple[Any, Any]] = []
    if "agentCapabilities" in msg or "capabilities" in msg:  # S-06 / S-07 fragments
        raw = msg["agentCapabilities"] if version == 1 else msg["capabilities"]
        caps = models_for(version).AgentCapabilities.model_validate(raw)
        pairs.append((raw, caps.to_wire()))
    elif "error" in msg:
        err = models_for(version).Error.model_validate(msg["error"])
        pairs.append((msg["error"], err.to_wire()))
    elif "params" in msg:
        params = msg["params"]
        if method == "session/update":
            event = parse_session_update(params, version)
            assert isinstance(event, SessionUpdateEvent)
            assert event.is_known, event.kind
            assert event.session_id == params["sessionId"]
            assert event.kind == params["update"]["sessionUpdate"]
            assert event.raw is params
            pairs.append((params["update"], event.update.to_wire()))
            pairs.append((params, parse_params(method, params, version).to_wire()))
        elif method == "session/status":
            pairs.append((params, SessionStatusRequest.model_validate(params).to_wire()))
        else:
            pairs.append((params, parse_params(method, params, version).to_wire()))
    else:
        result = msg["result"]
        if method == "session/status":
            pairs.append((result, parse_status_response(result, version).to_wire()))
        elif method == "initialize":
            pairs.append((result, parse_initialize_response(result, version).to_wire()))
        else:
            assert method is not None
            expected = {} if result is None else result  # V1-06: `"result": null` reads like `{}`
            pairs.append((expected, parse_result(method, result, version).to_wire()))
    return pairs


@pytest.mark.parametrize(("vec", "version"), _cases("spec"))
def test_spec_vector_round_trips(vec: dict[str, Any], version: int) -> None:
    for given, dumped in _parse(vec, version):
        assert dumped == given


@pytest.mark.parametrize(("vec", "version"), _cases("derived"))
def test_derived_vector(vec: dict[str, Any], version: int) -> None:
    expect = vec["expect"]
    msg = vec["message"]
    if "error" in msg:
        # D-08: a -32002 without data is still a well-formed error object
        err = models_for(version).Error.model_validate(msg["error"])
        assert err.code == -32002
        assert err.to_wire() == msg["error"]
        return
    if expect.get("roundtrip", True):
        for given, dumped in _parse(vec, version):
            assert dumped == given
    if vec["method"] == "session/status":
        resp = parse_status_response(msg["result"], version)
        if "status" in expect:
            assert resp.status == expect["status"]
            assert not resp.is_known_status
        if "state" in expect:
            if expect["state"] is None:
                assert resp.state is None  # not reported -- never idle
            else:
                assert resp.state is not None
                assert resp.state.state == expect["state"]
                assert resp.state.stop_reason == expect.get("stop_reason")
    elif vec["method"] == "session/update":
        event = parse_session_update(msg["params"], version)
        assert not isinstance(event.update, UnknownUpdate)
        if "state" in expect:
            assert event.update.state == expect["state"]


def test_every_vector_is_covered() -> None:
    ids = {v["id"].split("#")[0] for v in VECTORS}
    assert {f"V1-{i:02d}" for i in range(1, 15)} <= ids
    assert {f"V2-{i:02d}" for i in range(1, 10)} <= ids
    assert {f"S-{i:02d}" for i in range(1, 8)} <= ids
    assert {f"D-{i:02d}" for i in range(1, 9)} <= ids


@pytest.mark.parametrize(
    ("label", "version"),
    [("S-06#0", 1), ("S-07#0", 2)],
)
def test_status_capability_vectors(label: str, version: int) -> None:
    vec = next(v for v in VECTORS if v["id"] == label)
    raw = vec["message"]["agentCapabilities" if version == 1 else "capabilities"]
    assert status_supported(raw, version)
    assert not status_supported(raw, 2 if version == 1 else 1)
