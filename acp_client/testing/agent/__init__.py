"""The reference agent's parts, one job a module: its state and sessions (``_state``, ``_sessions``), the
methods it answers (``_methods``, ``_turns``, ``_tools``), its fault switches and records (``_faults``,
``_records``), the links it serves (``_channel``, ``_connection``, ``_sniff``, ``_http``, ``_http1``, ``_h2``,
``_http_wire``) and its command line (``_serve``). The agent itself is
:class:`acp_client.testing.reference_agent.ReferenceAgent`."""
