"""A recovery's ``Reattached`` outcome carries the link it produces (issue 33): the per-connection client
leaves the agent's answer in the recovery's ``UpdateAcceptance`` window, and applying the outcome moves the
link and writes the record (the version and the servers the resume sent), before the record is stored.
Over a real WebSocket to the reference agent (v2), with a record written by a v1 client."""

from __future__ import annotations

import dataclasses

from acp_client import MemorySessionStore, ReconnectingClient, SessionLink, SessionRecovered
from acp_client.sessions import SessionControl
from acp_client.testing import ReferenceAgent
from tests.conftest import bound, client_options, recorder

V1_SERVER = {"name": "fs", "command": "fs-mcp", "args": [], "env": []}


async def test_the_outcome_moves_the_link_and_writes_the_record_it_carries() -> None:
    async with ReferenceAgent(2) as agent:
        first = ReconnectingClient(agent.url, **client_options(protocol_version=2))
        await first.start()
        await first.wait_ready(timeout=bound(5))
        made = await first.new_session("/w")  # the agent keeps it after this client is gone
        await first.aclose()
        store = MemorySessionStore()
        # what a v1 client of an older release left: v1 version, a v1-shaped server (no "type")
        await store.save(dataclasses.replace(made.record, protocol_version=1, mcp_servers=[dict(V1_SERVER)]))
        client = ReconnectingClient(agent.url, **client_options(store=store, protocol_version=2))
        rec = recorder(client)
        try:
            await client.start()
            await rec.wait(lambda e: isinstance(e, SessionRecovered) and e.session_id == made.id, timeout=10)
            session = client.sessions[made.id]
            assert session.link is SessionLink.ATTACHED
            current = client.current
            assert current is not None and SessionControl().attached_to(session, current.connection.id)
            assert session.record.protocol_version == 2
            assert session.record.mcp_servers == [{"type": "stdio", **V1_SERVER}]
            resume = [r for r in agent.received if r.method == "session/resume"][-1]
            assert resume.params["mcpServers"] == session.record.mcp_servers  # what was sent is what is kept
            await client.wait_ready(timeout=bound(10))  # READY once the round's jobs ended: the record is stored
            stored = {r.session_id: r for r in await store.load_all()}[made.id]
            assert stored.protocol_version == 2 and stored.mcp_servers == session.record.mcp_servers
        finally:
            await rec.close()
            await client.aclose()
