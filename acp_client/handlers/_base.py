"""The base of what the client answers when the agent asks it something (agent→client requests).

Subclass :class:`ClientHandlers` and override what your application supports. The client advertises
exactly the capabilities whose methods you override; everything else gets a safe default: a permission
request is answered *cancelled* (never approved), file-system and terminal calls answer ``-32601``, and an
elicitation is declined.

``fs/*`` and ``terminal/*`` exist only in protocol v1; v2 removed them. Handlers that set
``serves_v2_extension`` also offer them in v2 as ACP extension methods (``_acp-client/fs/read_text_file``
…, same params and results), advertised under ``capabilities._meta["acp-client"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from acp_client.exceptions import InvalidParams, MethodNotFound

__all__ = [
    "EXTENSION_KEY",
    "EXTENSION_PREFIX",
    "ClientHandlers",
    "ElicitationRequest",
    "PermissionOption",
    "PermissionRequest",
    "TerminalExit",
    "TerminalOutput",
    "dispatch_request",
]


#: Prefix of the v2 extension methods that carry v1's ``fs/*`` and ``terminal/*`` (``_acp-client/fs/...``).
EXTENSION_PREFIX = "_acp-client/"
#: Key of the v2 extension capability under ``capabilities._meta`` (same shape as v1's ``fs``/``terminal``).
EXTENSION_KEY = "acp-client"


@dataclass(frozen=True, slots=True)
class PermissionOption:
    """One choice the agent offers in a permission request (``kind`` is an open set: keep unknown kinds)."""

    option_id: str
    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """``session/request_permission``: the agent wants the user to choose one of ``options``.

    ``tool_call`` is the v1 ``toolCall`` or the v2 ``subject.toolCall`` when present; ``title`` and
    ``description`` are v2 fields (``None`` in v1). ``raw`` holds the params exactly as received.
    """

    session_id: str
    options: tuple[PermissionOption, ...]
    tool_call: dict[str, Any] | None = None
    title: str | None = None
    description: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_params(cls, params: Any) -> PermissionRequest:
        """Read the request params of either protocol version; raises ``InvalidParams`` if unusable."""
        if not isinstance(params, dict) or not isinstance(params.get("sessionId"), str):
            raise InvalidParams(-32602, "Invalid params", {"reason": "sessionId is required"})
        options = []
        for item in params.get("options") or ():
            if isinstance(item, dict) and isinstance(item.get("optionId"), str):
                options.append(PermissionOption(item["optionId"], str(item.get("name", "")), str(item.get("kind", ""))))
        tool_call = params.get("toolCall")
        subject = params.get("subject")
        if tool_call is None and isinstance(subject, dict):
            tool_call = subject.get("toolCall")
        return cls(
            session_id=params["sessionId"],
            options=tuple(options),
            tool_call=tool_call if isinstance(tool_call, dict) else None,
            title=params.get("title") if isinstance(params.get("title"), str) else None,
            description=params.get("description") if isinstance(params.get("description"), str) else None,
            raw=params,
        )

    def option(self, *kinds: str) -> PermissionOption | None:
        """The first option whose kind is one of ``kinds`` (e.g. ``"allow_once"``), or ``None``."""
        return next((o for o in self.options if o.kind in kinds), None)


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """``elicitation/create``: the agent asks the user for structured input (``mode`` ``form`` or ``url``)."""

    mode: str
    message: str
    raw: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    """Answer to ``terminal/output`` (v1)."""

    output: str
    truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None


@dataclass(frozen=True, slots=True)
class TerminalExit:
    """Answer to ``terminal/wait_for_exit`` (v1)."""

    exit_code: int | None = None
    signal: str | None = None


class ClientHandlers:
    """Base class for the client side of agent→client requests; override what you support.

    Every method is a coroutine, runs in its own task (it may await the user or the agent), and may raise
    an :class:`~acp_client.exceptions.RPCError` to answer with that error. When the agent sends
    ``$/cancel_request`` for one of them, its task is cancelled and answered ``-32800`` for you; when your
    application cancels a session's turn (``session.cancel()``), every permission request of that session
    still waiting is cancelled and answered *cancelled*, as the protocol requires. If the connection dies,
    the tasks are cancelled too (their answers could not be delivered on another connection).

    Two lifecycle hooks tell handlers when to free what they hold (terminals, buffers):
    :meth:`session_ended` and :meth:`client_closed`.
    """

    #: Also serve ``fs/*`` and ``terminal/*`` in v2, as the ``_acp-client/`` extension methods (opt-in).
    serves_v2_extension: ClassVar[bool] = False

    async def request_permission(self, request: PermissionRequest) -> str | None:
        """Ask the user; return the chosen ``option_id``, or ``None`` for *cancelled* (the safe default)."""
        return None

    async def read_text_file(self, session_id: str, path: str, *, line: int | None, limit: int | None) -> str:
        """v1 ``fs/read_text_file``: return the file's text (from ``line``, at most ``limit`` lines)."""
        raise MethodNotFound(-32601, "Method not found", {"method": "fs/read_text_file"})

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        """v1 ``fs/write_text_file``: write ``content`` to ``path``."""
        raise MethodNotFound(-32601, "Method not found", {"method": "fs/write_text_file"})

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        *,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> str:
        """v1 ``terminal/create``: start ``command`` and return a terminal id."""
        raise MethodNotFound(-32601, "Method not found", {"method": "terminal/create"})

    async def terminal_output(self, session_id: str, terminal_id: str) -> TerminalOutput:
        """v1 ``terminal/output``."""
        raise MethodNotFound(-32601, "Method not found", {"method": "terminal/output"})

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> TerminalExit:
        """v1 ``terminal/wait_for_exit``."""
        raise MethodNotFound(-32601, "Method not found", {"method": "terminal/wait_for_exit"})

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        """v1 ``terminal/kill``."""
        raise MethodNotFound(-32601, "Method not found", {"method": "terminal/kill"})

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        """v1 ``terminal/release``."""
        raise MethodNotFound(-32601, "Method not found", {"method": "terminal/release"})

    async def create_elicitation(self, request: ElicitationRequest) -> dict[str, Any]:
        """``elicitation/create``: return ``{"action": "accept", "content": {...}}``, decline, or cancel."""
        return {"action": "decline"}

    # ------------------------------------------------------------------ lifecycle

    async def session_ended(self, session_id: str) -> None:
        """The session is over for this client: closed or deleted (``ACPClient.close_session`` /
        ``delete_session``), or forgotten by a ``ReconnectingClient``. Free what you hold for it (its
        terminals). Called after the fact; it must not raise. Does nothing by default."""

    async def client_closed(self) -> None:
        """The client using these handlers closed (``connect()``'s client or a ``ReconnectingClient``; not
        the per-connection clients a reconnecting client replaces on a drop). Free everything you hold; the
        handlers may be used again by a new client. Does nothing by default."""

    # ------------------------------------------------------------------ what is advertised

    def _overrides(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(ClientHandlers, name)

    def client_capabilities(self, protocol_version: int) -> dict[str, Any]:
        """The client capabilities to advertise in ``initialize`` for this protocol version.

        Only what the subclass implements is advertised. ``fs`` and ``terminal`` exist in v1 only.
        Override ``elicitation_modes`` to advertise elicitation.
        """
        caps: dict[str, Any] = {}
        modes: dict[str, Any] = {mode: {} for mode in self.elicitation_modes()}
        if protocol_version == 1:
            caps["fs"] = {
                "readTextFile": self._overrides("read_text_file"),
                "writeTextFile": self._overrides("write_text_file"),
            }
            caps["terminal"] = self._overrides("create_terminal")
        elif self.serves_v2_extension and self.needs_v1_only_capabilities():
            caps["_meta"] = {
                EXTENSION_KEY: {
                    "fs": {
                        "readTextFile": self._overrides("read_text_file"),
                        "writeTextFile": self._overrides("write_text_file"),
                    },
                    "terminal": self._overrides("create_terminal"),
                }
            }
        if modes and self._overrides("create_elicitation"):
            caps["elicitation"] = modes
        return caps

    def elicitation_modes(self) -> tuple[str, ...]:
        """Elicitation modes (``"form"``, ``"url"``) this client supports; none by default."""
        return ()

    def needs_v1_only_capabilities(self) -> bool:
        """``True`` when the handlers implement ``fs/*`` or ``terminal/*``, which only v1 can carry."""
        return any(self._overrides(name) for name in ("read_text_file", "write_text_file", "create_terminal"))


def _str(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str):
        raise InvalidParams(-32602, "Invalid params", {"reason": f"{key} must be a string"})
    return value


def _opt_int(params: dict[str, Any], key: str) -> int | None:
    value = params.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: The agent→client methods :func:`dispatch_request` answers (besides ``session/request_permission``).
_CLIENT_METHODS = frozenset(
    {
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
        "elicitation/create",
    }
)


async def dispatch_request(handlers: ClientHandlers, method: str, params: Any) -> Any:
    """Answer one agent→client request with ``handlers``; returns the JSON result or raises ``RPCError``."""
    if method == "session/request_permission":
        request = PermissionRequest.from_params(params)
        choice = await handlers.request_permission(request)
        if choice is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": choice}}
    if method.startswith(EXTENSION_PREFIX) and handlers.serves_v2_extension:
        inner = method[len(EXTENSION_PREFIX) :]
        if inner in _CLIENT_METHODS and inner != "elicitation/create":
            method = inner
    if method not in _CLIENT_METHODS:  # before looking at params: an unknown method is -32601 whatever it carries
        raise MethodNotFound(-32601, "Method not found", {"method": method})
    if not isinstance(params, dict):
        raise InvalidParams(-32602, "Invalid params", {"reason": "params must be an object"})
    if method == "fs/read_text_file":
        content = await handlers.read_text_file(
            _str(params, "sessionId"),
            _str(params, "path"),
            line=_opt_int(params, "line"),
            limit=_opt_int(params, "limit"),
        )
        return {"content": content}
    if method == "fs/write_text_file":
        await handlers.write_text_file(_str(params, "sessionId"), _str(params, "path"), _str(params, "content"))
        return {}
    if method == "terminal/create":
        env_items = params.get("env") or []
        env = {e["name"]: e["value"] for e in env_items if isinstance(e, dict) and "name" in e and "value" in e}
        args = [a for a in params.get("args") or [] if isinstance(a, str)]
        cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else None
        terminal_id = await handlers.create_terminal(
            _str(params, "sessionId"),
            _str(params, "command"),
            args=args,
            env=env,
            cwd=cwd,
            output_byte_limit=_opt_int(params, "outputByteLimit"),
        )
        return {"terminalId": terminal_id}
    if method == "terminal/output":
        out = await handlers.terminal_output(_str(params, "sessionId"), _str(params, "terminalId"))
        result: dict[str, Any] = {"output": out.output, "truncated": out.truncated}
        if out.exit_code is not None or out.signal is not None:
            result["exitStatus"] = {"exitCode": out.exit_code, "signal": out.signal}
        return result
    if method == "terminal/wait_for_exit":
        ex = await handlers.wait_for_terminal_exit(_str(params, "sessionId"), _str(params, "terminalId"))
        return {"exitCode": ex.exit_code, "signal": ex.signal}
    if method == "terminal/kill":
        await handlers.kill_terminal(_str(params, "sessionId"), _str(params, "terminalId"))
        return {}
    if method == "terminal/release":
        await handlers.release_terminal(_str(params, "sessionId"), _str(params, "terminalId"))
        return {}
    if method == "elicitation/create":
        return await handlers.create_elicitation(
            ElicitationRequest(mode=str(params.get("mode", "")), message=str(params.get("message", "")), raw=params)
        )
    raise MethodNotFound(-32601, "Method not found", {"method": method})
