"""Library manners: with no logging configuration the library writes nothing anywhere; one line turns the
structured event stream on (structlog, or stdlib logging)."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from acp_client._logging import get_logger
from tests.conftest import bound

ROOT = Path(__file__).resolve().parents[2]

# A whole client life with nothing configured: connect, prompt, a dropped link, recovery, another prompt.
_SCENARIO = """
import asyncio, sys
from acp_client import ReconnectingClient, RecoveryPolicy, SessionRecovered
from acp_client.testing import ReferenceAgent

async def main() -> None:
    async with ReferenceAgent({version}) as agent:
        async with ReconnectingClient(agent.url, policy=RecoveryPolicy(start_jitter=0.0)) as client:
            await client.wait_ready(timeout=20)
            events = client.events()
            session = await client.new_session("/work")
            first = await session.prompt("echo: one", timeout=20)
            assert first.stop_reason == "end_turn", first
            await agent.drop_all_connections(abort=True)
            async with asyncio.timeout(20):
                async for event in events:
                    if isinstance(event, SessionRecovered):
                        break
            await client.wait_ready(timeout=20)
            second = await session.prompt("echo: two", timeout=20)
            assert second.stop_reason == "end_turn", second
    {extra}

asyncio.run(main())
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONWARN"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=bound(60),
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
def test_a_whole_client_life_writes_nothing_without_configuration(version: int) -> None:
    done = _run(_SCENARIO.format(version=version, extra=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


def test_one_line_of_stdlib_logging_shows_the_event_stream() -> None:
    setup = "import logging; logging.basicConfig(level=logging.DEBUG, format='%(levelname)s %(name)s %(message)s')\n"
    done = _run(setup + _SCENARIO.format(version=2, extra=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "DEBUG acp_client.transports.websocket websocket_connecting" in done.stderr
    assert "INFO acp_client.connection connection_closed" in done.stderr
    assert "acp.connection_dropped" in done.stderr and "acp.session_recovered" in done.stderr


def test_one_line_of_structlog_shows_the_event_stream() -> None:
    setup = "import structlog, sys; structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))\n"
    done = _run(setup + _SCENARIO.format(version=2, extra=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "connection_closed" in done.stderr and "[debug" in done.stderr
    assert "acp.session_recovered" in done.stderr


@pytest.mark.parametrize(
    "setup",
    [
        "import structlog; structlog.configure()\n",  # structlog's own default: it would print to stdout
        "from structlog.testing import capture_logs\nwith capture_logs():\n    pass\n",  # leaves it 'configured'
    ],
    ids=["bare-configure", "after-capture_logs"],
)
def test_structlogs_stdout_default_is_never_used(setup: str) -> None:
    done = _run(setup + _SCENARIO.format(version=1, extra=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


def test_unconfigured_events_go_to_stdlib_logging(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("acp_client.test_quiet", connection_id=7)
    previous = structlog.get_config()
    structlog.reset_defaults()  # "the application configured nothing"
    try:
        with caplog.at_level(logging.DEBUG, logger="acp_client"):
            log.bind(attempt=2).info("something_happened", detail="x")
            log.debug("debug_detail")
    finally:
        structlog.configure(**previous)
    records = [r for r in caplog.records if r.name == "acp_client.test_quiet"]
    assert [r.getMessage() for r in records] == [
        "something_happened connection_id=7 attempt=2 detail='x'",
        "debug_detail connection_id=7",
    ]
    assert records[0].acp_event == "something_happened"  # type: ignore[attr-defined]
    assert records[0].acp_fields == {"connection_id": 7, "attempt": 2, "detail": "x"}  # type: ignore[attr-defined]
    assert records[0].levelno == logging.INFO


def test_configured_structlog_sees_bound_values() -> None:
    log = get_logger("acp_client.test_quiet").bind(session_id="s1")
    with structlog.testing.capture_logs() as logs:
        log.warning("odd_thing", count=3)
    assert logs == [{"event": "odd_thing", "session_id": "s1", "count": 3, "log_level": "warning"}]


def test_a_logger_follows_configuration_changes(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("acp_client.test_quiet").bind(n=1)
    with structlog.testing.capture_logs() as first:
        log.info("one")
    with structlog.testing.capture_logs() as second:
        log.info("two")
    assert [e["event"] for e in first] == ["one"]
    assert [e["event"] for e in second] == ["two"]
    previous = structlog.get_config()
    structlog.reset_defaults()
    try:
        with caplog.at_level(logging.INFO, logger="acp_client"):
            log.info("three")
    finally:
        structlog.configure(**previous)
    assert [r.getMessage() for r in caplog.records if r.name == "acp_client.test_quiet"] == ["three n=1"]


def test_what_counts_as_the_application_configuring_structlog() -> None:
    from acp_client._logging import structlog_wanted

    previous = structlog.get_config()
    try:
        structlog.reset_defaults()
        assert not structlog_wanted()  # nothing configured
        structlog.configure()
        assert not structlog_wanted()  # structlog's own stdout default
        with structlog.testing.capture_logs():
            assert structlog_wanted()  # a test capturing logs
        assert not structlog_wanted()  # what capture_logs leaves behind is the default again
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        assert structlog_wanted()  # a level chosen by the application
        structlog.reset_defaults()
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
        assert structlog_wanted()  # the documented one-liner
    finally:
        structlog.reset_defaults()
        structlog.configure(**previous)


def test_the_library_reaches_structlog_through_its_public_api_only() -> None:
    # issue 33: _logging imported structlog._config._CONFIG and read PrintLoggerFactory._file; a structlog
    # release may rename either without notice
    import ast

    found = []
    for path in sorted((ROOT / "acp_client").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            if any(m.startswith("structlog") and any(p.startswith("_") for p in m.split(".")) for m in modules):
                found.append(f"{path.name}:{node.lineno} imports {modules[0]}")
            if path.name == "_logging.py":  # no private attribute of anything but the module's own objects
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")
                ):
                    found.append(f"{path.name}:{node.lineno} reads .{node.attr}")
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr"
                    and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant)
                    and str(node.args[1].value).startswith("_")
                ):
                    found.append(f"{path.name}:{node.lineno} getattr {node.args[1].value}")
    assert found == []


def test_structlogs_default_is_recognised_whatever_file_object_the_factory_names() -> None:
    from acp_client._logging import structlog_wanted

    previous = structlog.get_config()
    try:
        structlog.reset_defaults()
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stdout))
        assert not structlog_wanted()  # stdout named explicitly: still structlog's printing default
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
        assert structlog_wanted()  # a file of the application's own
    finally:
        structlog.reset_defaults()
        structlog.configure(**previous)
