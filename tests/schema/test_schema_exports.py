"""The facade exports what the client layers were promised, and every public name is documented."""

from __future__ import annotations

import inspect

import acp_client.schema as schema
from acp_client.schema import status


def test_facade_exports() -> None:
    promised = {
        "v1",
        "v2",
        "parse_session_update",
        "SessionUpdateEvent",
        "UnknownUpdate",
        "parse_status_response",
        "SessionStatusResponse",
        "StateSnapshot",
        "parse_state_update",
        "parse_initialize_response",
        "status_supported",
        "capability_present",
        "supports_status",
        "patch_state",
        "patch_value",
        "OMITTED",
    }
    assert promised <= set(schema.__all__)
    for name in schema.__all__:
        assert hasattr(schema, name), name


def test_generated_classes_are_named_after_defs() -> None:
    assert schema.v1.InitializeResponse.__name__ == "InitializeResponse"
    assert schema.v2.UpdateSessionNotification.__name__ == "UpdateSessionNotification"
    assert schema.v1.METHODS["session/load"].result is schema.v1.LoadSessionResponse
    assert "session/load" not in schema.v2.METHODS


def test_public_names_have_docstrings() -> None:
    for module in (schema, status):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"
    for module in (schema.v1, schema.v2):
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                assert obj.__doc__, f"{module.__name__}.{name} has no docstring"
