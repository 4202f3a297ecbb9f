"""``acp-client bridge``: a stdio ACP agent that forwards to a remote agent and survives dropped links.

An editor that starts agents as local processes (Zed, JetBrains, Neovim plugins) runs the bridge as if it
were the agent. The bridge answers ``initialize`` with what the remote agent advertises, forwards every
request and notification, and sends the remote's updates and agent→client requests back to the editor;
underneath, a :class:`~acp_client.ReconnectingClient` reconnects and recovers each session after a drop.

Modules: ``_editor`` (the editor side: stdio JSON-RPC, stdout reserved for frames), ``_bridge`` (lifecycle,
dispatch of the editor's requests and notifications, ``initialize``), ``_routes`` (what each request method
does), ``_remote`` (the remote client, outage waits, the store hook), ``_options`` (options and recovery
strategy), ``_forward`` (per-session update forwarding and the session mapping), ``_view`` (what the
editor has seen; replay reconciliation), ``_outage`` (errors and notices during outages), ``_handlers``
(agent→client requests answered by the editor), ``_tap`` (raw results on the remote link), ``_cli``.
See ``examples/editor_bridge.md`` for the rules and how to configure an editor.
"""

from acp_client.bridge._bridge import Bridge
from acp_client.bridge._cli import add_arguments, run_command
from acp_client.bridge._options import BridgeOptions, BridgeStrategy

__all__ = ["Bridge", "BridgeOptions", "BridgeStrategy", "add_arguments", "run_command"]
