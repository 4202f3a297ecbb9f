"""A pydantic-ai agent served over ACP stdio by pydantic-acp, with pydantic-ai's offline ``TestModel``.

    python pydantic_acp_agent.py --store DIR [--unstable]

Run by the interpreter of the cached install (``_pydantic_acp.py``), never imported by the tests. Sessions
live in a ``FileSessionStore`` under DIR, so a new process can load what an earlier one created.
``--unstable`` turns on the ACP SDK's unstable methods (pydantic-acp advertises resume and close, but the
SDK routes them only with this flag; without it they answer -32601).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from acp import run_agent
from pydantic_acp import AdapterConfig, FileSessionStore, create_acp_agent
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--unstable", action="store_true")
    args = parser.parse_args()
    agent = Agent(TestModel(custom_output_text="echo from TestModel"), name="interop-test-agent")
    config = AdapterConfig(session_store=FileSessionStore(root=args.store))
    asyncio.run(run_agent(create_acp_agent(agent, config=config), use_unstable_protocol=args.unstable))


if __name__ == "__main__":
    main()
