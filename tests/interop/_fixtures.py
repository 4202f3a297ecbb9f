"""The setup the third-party agent tests share: a private HOME and a project folder per test, the bounds a
``ReconnectingClient`` gets for an agent that starts slowly on a loaded 2-core machine, and the first steps
of a lifecycle test that several agents answer alike, and the loopback-only prefix (``no_network``).

A ``test_<agent>.py`` imports the fixtures it uses (and names them in ``__all__`` so that pytest finds them
there); an agent whose HOME needs more than an empty folder defines its own ``home``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_client import ACPClient, Backoff, RecoveryPolicy, Session, Timeouts
from tests.conftest import bound
from tests.interop._opencode import offline_prefix


def slow_options(*, replay_silence: float, list_check: float, backoff_cap: float) -> dict[str, Any]:
    """``ReconnectingClient`` keywords for a real agent: every bound generous (scaled by ``bound``), no
    start jitter, a short backoff capped at ``backoff_cap`` seconds."""
    return {
        "timeouts": Timeouts(
            initialize=bound(60),
            request=bound(60),
            probe=bound(60),
            replay_silence=bound(replay_silence),
            list_check=bound(list_check),
        ),
        "policy": RecoveryPolicy(start_jitter=0.0, stable_after=0.0),
        "backoff": Backoff(base=0.02, cap=backoff_cap),
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty private HOME for the agent (its sessions and settings live there)."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The working folder sessions are opened in."""
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def no_network() -> list[str] | None:
    """The command prefix that runs an agent where only loopback exists, when this machine can (see
    ``offline_prefix``); ``None`` where it cannot."""
    return offline_prefix()


async def v1_session(client: ACPClient, project: Path, *, timeout: float) -> Session:
    """A new session in ``project`` on an agent that speaks v1 and advertises ``loadSession`` and
    ``sessionCapabilities`` list and resume, but no ``session/status`` (opencode, kimi-cli, pydantic-acp)."""
    assert client.protocol_version == 1
    assert client.supports("load") and client.supports("list") and client.supports("resume")
    assert not client.supports("status")
    return await client.new_session(str(project), timeout=timeout)


async def offline_turn(session: Session, prompt: str, *, timeout: float) -> str:
    """A prompt turn that an offline model answers (it ends ``end_turn``); the session's transcript after it."""
    result = await session.prompt(prompt, timeout=timeout)
    assert result.stop_reason == "end_turn", result
    return session.transcript.text()
