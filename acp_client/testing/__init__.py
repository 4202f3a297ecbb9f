"""The shipped test kit: an in-process ACP reference agent (:class:`ReferenceAgent`, or :class:`AgentThread`
to host one on a thread of its own), :class:`ScriptedAgent` whose every answer a test scripts, the
:class:`FaultProxy` fault injector, :class:`EventRecorder` with :func:`start_client` and the
:data:`FAST_RETRY` preset to watch a reconnecting client, and :class:`RedisServer` (a real Valkey 8 /
Redis 6.2 server from its pip wheel, for shared session stores).

Nothing else in :mod:`acp_client` imports this package. Exports are resolved lazily, so that
``python -m acp_client.testing.reference_agent`` does not import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp_client.testing._agent_thread import AgentThread
    from acp_client.testing._recorder import FAST_RETRY, EventRecorder, FastRetry, start_client
    from acp_client.testing._scripted import ScriptedAgent, ScriptedCall, ScriptedError, ScriptedHandler, ScriptedLink
    from acp_client.testing.agent._errors import AgentError, RawAnswer
    from acp_client.testing.agent._records import Received
    from acp_client.testing.agent._resumable import Resumable
    from acp_client.testing.agent._sessions import AgentSessionRecord
    from acp_client.testing.agent._turns import PromptTurn
    from acp_client.testing.fault_proxy import FaultProxy, LinkMode, ProxyLink, ProxyMode
    from acp_client.testing.redis_server import RedisServer
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = [
    "FAST_RETRY",
    "AgentError",
    "AgentSessionRecord",
    "AgentThread",
    "EventRecorder",
    "FastRetry",
    "FaultProxy",
    "LinkMode",
    "PromptTurn",
    "ProxyLink",
    "ProxyMode",
    "RawAnswer",
    "Received",
    "RedisServer",
    "ReferenceAgent",
    "Resumable",
    "ScriptedAgent",
    "ScriptedCall",
    "ScriptedError",
    "ScriptedHandler",
    "ScriptedLink",
    "start_client",
]

#: public name → the module defining it
_EXPORTS = {
    "FAST_RETRY": "acp_client.testing._recorder",
    "AgentThread": "acp_client.testing._agent_thread",
    "EventRecorder": "acp_client.testing._recorder",
    "FastRetry": "acp_client.testing._recorder",
    "ScriptedAgent": "acp_client.testing._scripted",
    "ScriptedCall": "acp_client.testing._scripted",
    "ScriptedError": "acp_client.testing._scripted",
    "ScriptedHandler": "acp_client.testing._scripted",
    "ScriptedLink": "acp_client.testing._scripted",
    "start_client": "acp_client.testing._recorder",
    "AgentError": "acp_client.testing.agent._errors",
    "AgentSessionRecord": "acp_client.testing.agent._sessions",
    "FaultProxy": "acp_client.testing.fault_proxy",
    "LinkMode": "acp_client.testing.fault_proxy",
    "ProxyLink": "acp_client.testing.fault_proxy",
    "ProxyMode": "acp_client.testing.fault_proxy",
    "PromptTurn": "acp_client.testing.agent._turns",
    "RawAnswer": "acp_client.testing.agent._errors",
    "Received": "acp_client.testing.agent._records",
    "Resumable": "acp_client.testing.agent._resumable",
    "ReferenceAgent": "acp_client.testing.reference_agent",
    "RedisServer": "acp_client.testing.redis_server",
}


def __getattr__(name: str) -> Any:
    """Import an exported name on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Module attributes, including the lazily imported exports."""
    return sorted(set(globals()) | set(__all__))
