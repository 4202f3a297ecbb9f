"""A spawned stdio agent gets the application's OTLP settings and a service name, never its credentials.

The agent is a real child process (a tiny Python script spawned over the stdio transport) that reports its
``OTEL_*`` environment as one JSON-RPC notification. The client process's environment is set with
``monkeypatch.setenv`` (the configuration an application gives OpenTelemetry), or given to
``acp_client.otel.instrument(agent_otel=...)``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import acp_client.otel
from acp_client import UsageError
from acp_client.transports import spawn_stdio
from tests.conftest import bound

ENDPOINT = "http://127.0.0.1:4318"
HEADERS = "authorization=Bearer s3cret"
REPORTER = """
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith("OTEL_") or k == "ACP_TEST_MARKER"}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "env", "params": env}) + "\\n")
sys.stdout.flush()
sys.stdin.read()
"""


@pytest.fixture
def reporter(tmp_path: Path) -> Path:
    script = tmp_path / "env_agent.py"
    script.write_text(REPORTER, encoding="utf-8")
    return script


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ACP_TEST_MARKER", "inherited")
    yield
    acp_client.otel.uninstrument()


async def _agent_env(script: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    transport = await spawn_stdio([sys.executable, str(script)], env=env)
    try:
        async with asyncio.timeout(bound(20)):
            frame = await transport.recv()
    finally:
        await transport.close()
    report: dict[str, str] = json.loads(frame)["params"]
    return report


async def test_the_process_otlp_settings_go_to_the_agent_without_credentials(
    reporter: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ENDPOINT + "/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", HEADERS)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/secret/key.pem")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-chat-frontend")
    env = await _agent_env(reporter)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == ENDPOINT
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == ENDPOINT + "/v1/traces"
    assert env["OTEL_SERVICE_NAME"] == "acp-agent-env_agent.py"  # its own, not the client's
    assert not any("HEADERS" in k or "CLIENT_KEY" in k for k in env), env
    assert env["ACP_TEST_MARKER"] == "inherited"  # the rest of the environment is still inherited


async def test_values_the_user_set_in_the_agents_env_are_kept(reporter: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    given = {
        "OTEL_SERVICE_NAME": "my-agent",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9999",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-agent-key=own",  # the user's own choice for this agent
    }
    env = await _agent_env(reporter, env=given)
    assert env["OTEL_SERVICE_NAME"] == "my-agent"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:9999"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"  # added: the env did not set it
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "x-agent-key=own"
    assert "ACP_TEST_MARKER" not in env  # env replaces the environment, as subprocess does


async def test_the_instrumentations_settings_win_over_the_process_env(
    reporter: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    acp_client.otel.instrument(
        agent_otel={"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SERVICE_NAME": "the-agent"}
    )
    env = await _agent_env(reporter)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == ENDPOINT and env["OTEL_SERVICE_NAME"] == "the-agent"


async def test_nothing_configured_changes_nothing(reporter: Path) -> None:
    env = await _agent_env(reporter)
    assert env == {"ACP_TEST_MARKER": "inherited"}


@pytest.mark.parametrize(
    "settings",
    [{"OTEL_EXPORTER_OTLP_HEADERS": HEADERS}, {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": HEADERS}, {"OTEL_FOO": "x"}],
)
def test_a_credential_or_unknown_key_is_refused_when_given(settings: dict[str, str]) -> None:
    with pytest.raises(UsageError, match=r"instrument\(agent_otel=\.\.\.\)") as caught:
        acp_client.otel.instrument(agent_otel=settings)
    assert "s3cret" not in str(caught.value)
