"""A stdio agent that writes something other than JSON-RPC on stdout is quoted in the error (issue 20,
item 2): ``initialize got no answer`` alone does not tell the user that the agent logs to stdout."""

from __future__ import annotations

import sys

import pytest

from acp_client import Timeouts, connect
from acp_client.exceptions import ACPTimeoutError
from tests.conftest import bound

#: an "agent" that logs a banner to stdout, then reads its input and never answers
CHATTY = "import sys; print('Loading model weights...', flush=True); sys.stdin.read()"


async def test_a_stray_stdout_line_is_quoted() -> None:
    with pytest.raises(ACPTimeoutError) as caught:
        async with connect([sys.executable, "-c", CHATTY], timeouts=Timeouts(initialize=bound(1.0))):
            pass
    text = str(caught.value)
    assert text.startswith("initialize got no answer within")
    assert "'Loading model weights...'" in text and "stderr" in text
    assert isinstance(caught.value, TimeoutError)


async def test_a_silent_agent_says_only_that_it_did_not_answer() -> None:
    with pytest.raises(ACPTimeoutError) as caught:
        async with connect([sys.executable, "-c", "import sys; sys.stdin.read()"], timeouts=Timeouts(initialize=0.5)):
            pass
    assert "not a JSON-RPC message" not in str(caught.value)
