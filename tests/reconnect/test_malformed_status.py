"""A ``session/status`` answer with no readable status (``null``, ``{}``, a non-string ``status``, a bare string
or a list) is a failed probe: recovery goes straight to resume/load, as after ``-32601``. It is never probed
forever and never forgotten (issue 18, item 4)."""

from __future__ import annotations

from typing import Any

import pytest

from acp_client import SessionForgotten, SessionLink, SessionRecovered, SessionRecoveryFailed
from acp_client.testing import RawAnswer, ReferenceAgent
from tests.conftest import bound, started

MALFORMED = [None, {}, {"status": 5}, {"status": None}, "active", [{"status": "active"}]]


@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1"])
@pytest.mark.parametrize("answer", MALFORMED, ids=["null", "empty", "number", "null-status", "bare-string", "list"])
async def test_a_malformed_status_answer_goes_straight_to_resume_or_load(version: int, answer: Any) -> None:
    async with ReferenceAgent(version) as agent:
        client, rec = await started(agent.url)
        try:
            session = await client.new_session("/w")
            agent.status_override[session.id] = RawAnswer(answer)
            await agent.drop_all_connections()
            (event,) = await rec.wait(
                lambda e: isinstance(e, SessionRecovered) and e.session_id == session.id, timeout=bound(10)
            )
            assert event.status is None
            assert event.mode == ("resume" if version == 2 else "load")
            assert not rec.of(SessionRecoveryFailed) and not rec.of(SessionForgotten)
            assert agent.count("session/status", session.id) == 1  # probed once, not again and again
            assert session.link is SessionLink.ATTACHED
        finally:
            await rec.close()
            await client.aclose()
