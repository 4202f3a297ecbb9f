"""What the reading of the CLI and the test kit asked to tidy stays tidy."""

from __future__ import annotations

import argparse

import acp_client
import acp_client.cli as cli
from acp_client.testing import ReferenceAgent
from acp_client.testing.agent._serve import _parser as agent_parser


def _options(parser: argparse.ArgumentParser) -> dict[str, tuple[object, object]]:
    return {
        action.dest: (action.default, tuple(action.choices) if action.choices else None)
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    }


def test_serve_reference_takes_exactly_the_agents_own_options() -> None:
    command = next(c for c in cli.COMMANDS if c.name == "serve-reference")
    ours = argparse.ArgumentParser()
    command.configure(ours)
    assert _options(ours) == _options(agent_parser())
    assert "state_dir" in _options(ours)


def test_the_demo_lives_outside_the_cli_module() -> None:
    assert not hasattr(cli, "_Demo") and not hasattr(cli, "DEMO_DEADLINE")
    assert {c.name for c in cli.COMMANDS} >= {"demo", "status", "locate", "sessions", "serve-reference"}


async def test_the_test_kits_session_record_has_its_own_name() -> None:
    async with ReferenceAgent(2) as agent, acp_client.connect(agent.url) as client:
        session = await client.new_session("/work")
        record = agent.sessions[session.id]
    assert type(record).__name__ == "AgentSessionRecord"
    assert type(record) is not acp_client.SessionRecord
