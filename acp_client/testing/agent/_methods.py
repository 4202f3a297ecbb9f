"""The reference agent's ACP method handlers (v1 and v2), and the dispatcher that gates them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from acp_client._logging import get_logger
from acp_client.testing.agent._capabilities import AUTH_METHOD_ID, METHOD_GATES, initialize_result
from acp_client.testing.agent._errors import (
    AUTH_REQUIRED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    AgentError,
    RawAnswer,
)
from acp_client.testing.agent._sessions import (
    MODES,
    AgentSessionRecord,
    available_commands,
    config_options,
    config_values,
    list_page,
    modes_state,
    new_session_id,
    replay_updates,
)
from acp_client.testing.agent._turns import PromptTurn, emit_update

if TYPE_CHECKING:
    from acp_client.testing.agent._connection import AgentConnection, Reply
    from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["dispatch", "handle_notification"]

_log = get_logger(__name__)

Handler = Callable[["ReferenceAgent", "AgentConnection", dict[str, Any], "Reply"], Awaitable[Any]]

_V1_ONLY = frozenset({"authenticate", "logout", "session/load", "session/set_mode"})
_V2_ONLY = frozenset({"auth/login", "auth/logout", "tool_call/cancel"})
#: methods answering -32000 until the connection authenticated, when the agent requires authentication
_AUTH_GATED = frozenset(
    {
        "session/new",
        "session/load",
        "session/resume",
        "session/prompt",
        "session/list",
        "session/close",
        "session/delete",
        "session/set_mode",
        "session/set_config_option",
        "session/archive",
        "session/unarchive",
    }
)
#: how long close/delete wait for a cancelled turn to report its end
_TURN_END_TIMEOUT = 5.0


# ---------------------------------------------------------------------------- parameter helpers


def _str(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise AgentError.invalid_params(f"'{key}' must be a non-empty string")
    return value


def _abs_path(params: dict[str, Any], key: str) -> str:
    value = _str(params, key)
    if not value.startswith("/"):
        raise AgentError.invalid_params(f"'{key}' must be an absolute path")
    return value


def _mcp_servers(connection: AgentConnection, params: dict[str, Any], *, required_in_v1: bool) -> list[Any]:
    value = params.get("mcpServers")
    if value is None:
        if required_in_v1 and (connection.protocol_version or 0) < 2:
            raise AgentError.invalid_params("'mcpServers' is required")
        return []
    if not isinstance(value, list):
        raise AgentError.invalid_params("'mcpServers' must be an array")
    return list(value)


def _directories(agent: ReferenceAgent, params: dict[str, Any]) -> list[str]:
    value = params.get("additionalDirectories")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(d, str) and d.startswith("/") for d in value):
        raise AgentError.invalid_params("'additionalDirectories' must be an array of absolute paths")
    if value and not agent.has_capability("additionalDirectories"):
        raise AgentError.invalid_params("additionalDirectories is not supported")
    return list(value)


def _known(agent: ReferenceAgent, params: dict[str, Any]) -> AgentSessionRecord:
    session_id = _str(params, "sessionId")
    session = agent.sessions.get(session_id)
    if session is None:
        raise _unknown(agent, session_id)
    return session


def _unknown(agent: ReferenceAgent, session_id: str) -> AgentError:
    """The answer for a session the agent does not know: ``-32002``, or the dialect the test set."""
    dialect = agent.unknown_session_error
    return AgentError.unknown_session(session_id) if dialect is None else dialect(session_id)


def _check_cwd(session: AgentSessionRecord, params: dict[str, Any]) -> None:
    cwd = _abs_path(params, "cwd")
    if cwd != session.cwd:
        raise AgentError.invalid_params(f"cwd {cwd!r} does not match the session's cwd {session.cwd!r}")


def _attached_here(connection: AgentConnection, params: dict[str, Any], agent: ReferenceAgent) -> AgentSessionRecord:
    session = _known(agent, params)
    if not session.in_memory or session.connection is not connection:
        raise AgentError(
            INVALID_PARAMS,
            data={
                "sessionId": session.session_id,
                "reason": "session is not attached to this connection (session/resume or session/load first)",
            },
        )
    return session


async def _end_turn_of(session: AgentSessionRecord) -> None:
    turn = session.turn
    if turn is None:
        return
    turn.cancel()
    await asyncio.wait([turn.done], timeout=_TURN_END_TIMEOUT)


async def _replay_then_respond(
    agent: ReferenceAgent,
    connection: AgentConnection,
    session: AgentSessionRecord,
    reply: Reply,
    *,
    replay: bool,
    as_chunks: bool,
    snapshot: bool,
    result: Any,
) -> None:
    """Attach, replay, optionally send the v2 state snapshot, respond — atomically w.r.t. live updates."""
    async with session.emit_lock:
        session.attach(connection)
        agent.records.notify_changed()
        updates = replay_updates(list(session.transcript), as_chunks=as_chunks) if replay else []
        for update in updates:
            await connection.notify("session/update", {"sessionId": session.session_id, "update": update})
        if snapshot:
            await connection.notify(
                "session/update", {"sessionId": session.session_id, "update": session.state_update()}
            )
        await reply.result(result)
    session.notify_attached()


# ---------------------------------------------------------------------------- handlers


async def _initialize(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    if agent.initialize_error is not None:
        raise agent.initialize_error
    offered = params.get("protocolVersion")
    if not isinstance(offered, int) or isinstance(offered, bool) or not 0 <= offered <= 65535:
        raise AgentError.invalid_params("'protocolVersion' must be an integer")
    version = offered if offered in agent.supported_versions else agent.protocol_version
    connection.protocol_version = version
    connection.client_info = params.get("info") if version >= 2 else params.get("clientInfo")
    connection.client_capabilities = params.get("capabilities") if version >= 2 else params.get("clientCapabilities")
    _log.debug("reference_agent_initialized", connection_id=connection.id, offered=offered, version=version)
    resumable = agent.resumable.capability() if agent.resumable is not None else None
    await reply.result(initialize_result(version, agent.capability_flags, agent.require_auth, resumable))
    agent.faults.after_initialize(connection)
    return None


async def _login(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    method_id = params.get("methodId")
    if method_id != AUTH_METHOD_ID:
        raise AgentError.invalid_params(f"unknown authentication method {method_id!r}")
    connection.authenticated = True
    return {}


async def _logout(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    connection.authenticated = False
    return {}


async def _new(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    cwd = _abs_path(params, "cwd")
    session = AgentSessionRecord(
        session_id=new_session_id(),
        cwd=cwd,
        mcp_servers=_mcp_servers(connection, params, required_in_v1=True),
        additional_directories=_directories(agent, params),
    )
    session.attach(connection)
    agent.sessions[session.session_id] = session
    agent.records.notify_changed()
    result: dict[str, Any] = {"sessionId": session.session_id, "configOptions": config_options(session.config)}
    if (connection.protocol_version or 0) < 2:
        result["modes"] = modes_state(session.mode_id)
    else:
        result["availableCommands"] = available_commands()  # v2 alpha.6
    return result


async def _load(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session_id = _str(params, "sessionId")
    if agent.load_unknown_succeeds and session_id not in agent.sessions:
        # pydantic-acp's dialect: success, no replay, and nothing kept or listed under that id
        _abs_path(params, "cwd")
        return None if agent.load_result_null else {}
    session = _known(agent, params)
    _check_cwd(session, params)
    session.mcp_servers = _mcp_servers(connection, params, required_in_v1=True)
    session.additional_directories = _directories(agent, params)
    result: dict[str, Any] | None = None if agent.load_result_null else {}
    await _replay_then_respond(
        agent, connection, session, reply, replay=True, as_chunks=True, snapshot=False, result=result
    )
    return None


async def _resume(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session = _known(agent, params)
    _check_cwd(session, params)
    session.mcp_servers = _mcp_servers(connection, params, required_in_v1=False)
    session.additional_directories = _directories(agent, params)
    v2 = (connection.protocol_version or 0) >= 2
    replay = False
    if v2:
        replay_from = params.get("replayFrom")
        if isinstance(replay_from, dict):
            if replay_from.get("type") != "start":
                raise AgentError.invalid_params(f"unsupported replayFrom type {replay_from.get('type')!r}")
            replay = True
        # any other malformed value: DefaultOnError → no replay
    await _replay_then_respond(
        agent,
        connection,
        session,
        reply,
        replay=replay,
        as_chunks=agent.replay_as == "chunks",
        snapshot=v2 and agent.resume_snapshot,
        # v2 alpha.6/7: the answer says the session's commands and config options
        result={"availableCommands": available_commands(), "configOptions": config_options(session.config)}
        if v2
        else {},
    )
    return None


async def _list(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    cwd = params.get("cwd")
    cursor = params.get("cursor")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentError.invalid_params("'cwd' must be a string")
    if cursor is not None and not isinstance(cursor, str):
        raise AgentError.invalid_params("'cursor' must be a string")
    if agent.list_answer is not None:
        return agent.list_answer(params)
    if agent.list_requires_cwd and cwd is None:
        return {"sessions": []}  # kimi-cli's dialect: nothing is listed without a cwd
    try:
        archived = params.get("archived")
        if archived is not None and archived not in ("exclude", "include", "only"):
            raise ValueError(f"archived must be exclude, include or only, not {archived!r}")
        return list_page(
            agent.sessions.values(), cwd=cwd, cursor=cursor, page_size=agent.list_page_size, archived=archived
        )
    except ValueError as exc:
        raise AgentError.invalid_params(str(exc)) from exc


async def _close(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session = _known(agent, params)
    await _end_turn_of(session)
    session.unload()
    agent.records.notify_changed()
    return {}


async def _delete(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session_id = _str(params, "sessionId")
    session = agent.sessions.get(session_id)
    if session is not None:  # deleting an unknown session succeeds silently
        await _end_turn_of(session)
        agent.sessions.pop(session_id, None)
        agent.records.notify_changed()
    return {}


async def _archive(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    _known(agent, params).archived = True
    agent.records.notify_changed()
    return {}


async def _unarchive(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    _known(agent, params).archived = False
    agent.records.notify_changed()
    return {}


async def _auth_status(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    if not agent.require_auth:
        return {"state": "not_required"}
    state = "authenticated" if connection.authenticated else "unauthenticated"
    return {"state": state, "accounts": [{"label": "Agent login", "active": connection.authenticated}]}


async def _cancel_tool_call(
    agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply
) -> Any:
    session = _known(agent, params)
    stop = session.cancellable_tools.get(_str(params, "toolCallId"))
    if stop is None:  # unknown, already final, or not cancellable
        raise AgentError.invalid_params("the tool call is unknown, final, or not cancellable")
    if not stop.done():
        stop.set_result(None)
    return {}  # accepted: the tool call's final status follows as an update


async def _status(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session_id = _str(params, "sessionId")
    if session_id in agent.hang_status:
        await asyncio.Event().wait()  # never answered (until the connection or the agent goes away)
    override = agent.status_override.get(session_id)
    if isinstance(override, AgentError):
        raise override
    if isinstance(override, str):
        return {"status": override}
    if isinstance(override, RawAnswer):
        return override.value
    session = agent.sessions.get(session_id)
    if session is None:
        raise _unknown(agent, session_id)
    result: dict[str, Any] = {"status": session.status}
    if (connection.protocol_version or 0) >= 2 and session.in_memory:
        result["state"] = session.state_snapshot()
    return result


async def _prompt(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session = _attached_here(connection, params, agent)
    prompt = params.get("prompt")
    if not isinstance(prompt, list) or not all(isinstance(block, dict) for block in prompt):
        raise AgentError.invalid_params("'prompt' must be an array of content blocks")
    if session.turn is not None:
        raise AgentError(INVALID_REQUEST, data={"reason": "a prompt turn is already running in this session"})
    turn = PromptTurn(agent, connection, session, prompt, reply)
    await turn.run(agent.on_prompt)
    return None


async def _set_mode(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session = _attached_here(connection, params, agent)
    mode_id = params.get("modeId")
    if not isinstance(mode_id, str) or mode_id not in {m for m, _ in MODES}:
        raise AgentError.invalid_params(f"unknown mode {mode_id!r}")

    def switch() -> None:
        session.mode_id = mode_id

    await emit_update(agent, session, {"sessionUpdate": "current_mode_update", "currentModeId": mode_id}, switch)
    return {}


async def _set_config(agent: ReferenceAgent, connection: AgentConnection, params: dict[str, Any], reply: Reply) -> Any:
    session = _attached_here(connection, params, agent)
    config_id = _str(params, "configId")
    allowed = config_values(config_id)
    if allowed is None:
        raise AgentError.invalid_params(f"unknown config option {config_id!r}")
    kind = params.get("type")
    value = params.get("value")
    if kind not in (None, "id") or not isinstance(value, str) or value not in allowed:
        raise AgentError.invalid_params(f"invalid value {value!r} for {config_id!r}")
    session.config[config_id] = value
    return {"configOptions": config_options(session.config)}


_HANDLERS: dict[str, Handler] = {
    "initialize": _initialize,
    "authenticate": _login,
    "auth/login": _login,
    "logout": _logout,
    "auth/logout": _logout,
    "session/new": _new,
    "session/load": _load,
    "session/resume": _resume,
    "session/list": _list,
    "session/close": _close,
    "session/delete": _delete,
    "session/status": _status,
    "session/archive": _archive,
    "session/unarchive": _unarchive,
    "auth/status": _auth_status,
    "tool_call/cancel": _cancel_tool_call,
    "session/prompt": _prompt,
    "session/set_mode": _set_mode,
    "session/set_config_option": _set_config,
}


async def dispatch(agent: ReferenceAgent, connection: AgentConnection, method: str, params: Any, reply: Reply) -> Any:
    """Route one request to its handler after the version, capability, quirk and authentication gates."""
    handler = _HANDLERS.get(method)
    if handler is None:
        raise AgentError(METHOD_NOT_FOUND, data={"method": method})
    if params is not None and not isinstance(params, dict):
        raise AgentError.invalid_params("params must be an object")
    p: dict[str, Any] = params or {}
    if method == "initialize":
        return await handler(agent, connection, p, reply)
    version = connection.protocol_version
    if version is None:
        raise AgentError(INVALID_REQUEST, data={"reason": "the first request must be initialize"})
    if (method in _V1_ONLY and version >= 2) or (method in _V2_ONLY and version < 2):
        raise AgentError(METHOD_NOT_FOUND, data={"method": method})
    gate = METHOD_GATES.get(method)
    if gate is not None and not agent.has_capability(gate):
        raise AgentError(METHOD_NOT_FOUND, data={"method": method})
    if (method == "session/status" and agent.status_answers_method_not_found) or (
        method == "session/resume" and agent.resume_answers_method_not_found
    ):
        raise AgentError(METHOD_NOT_FOUND, data={"method": method})
    if agent.require_auth and not connection.authenticated and method in _AUTH_GATED:
        raise AgentError(AUTH_REQUIRED)
    injected = agent.method_errors.get(method)
    if injected is not None:
        raise injected
    return await handler(agent, connection, p, reply)


async def handle_notification(agent: ReferenceAgent, connection: AgentConnection, method: str, params: Any) -> None:
    """Handle a client notification (``session/cancel``); unknown notifications are ignored."""
    if method != "session/cancel" or not isinstance(params, dict):
        return
    session = agent.sessions.get(params.get("sessionId", ""))
    if session is not None and session.turn is not None:
        session.turn.cancel()
