"""Permission policies: async callables that answer a :class:`PermissionRequest` with an option id.

A policy answers the agent's own ``session/request_permission`` and, in a
:class:`~acp_client.handlers.Workspace`, the questions the workspace asks before a write or a terminal.
It returns the chosen ``option_id``; ``None`` means *cancelled*, which is never approval.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from acp_client.exceptions import UsageError
from acp_client.handlers._base import PermissionRequest

__all__ = [
    "POLICY_NAMES",
    "READ_KINDS",
    "PermissionPolicy",
    "allow_reads",
    "ask",
    "deny",
    "permission_policy",
    "request_kind",
]

#: ``async (request) -> option_id | None``: ``None`` answers *cancelled*.
PermissionPolicy: TypeAlias = Callable[[PermissionRequest], Awaitable[str | None]]

#: Tool kinds that only look (ACP ``ToolKind``): ``allow_reads`` approves these and nothing else.
READ_KINDS = frozenset({"read", "search", "fetch", "think"})


def request_kind(request: PermissionRequest) -> str | None:
    """What the request is about, in both shapes: the tool call's ``kind`` (v1 ``toolCall``, v2
    ``subject.toolCall``), ``"execute"`` for a v2 ``subject`` of type ``command``, else ``None``."""
    subject = request.raw.get("subject")
    if isinstance(subject, dict) and subject.get("type") == "command":
        return "execute"
    kind = request.tool_call.get("kind") if request.tool_call is not None else None
    return kind if isinstance(kind, str) else None


async def deny(request: PermissionRequest) -> str | None:
    """Refuse everything: pick a ``reject_once``/``reject_always`` option, or answer *cancelled*."""
    option = request.option("reject_once", "reject_always")
    return option.option_id if option is not None else None


async def allow_reads(request: PermissionRequest) -> str | None:
    """Allow once what only reads (:data:`READ_KINDS`); refuse the rest like :func:`deny`."""
    if request_kind(request) in READ_KINDS:
        option = request.option("allow_once")
        if option is not None:
            return option.option_id
    return await deny(request)


def ask(dialog: PermissionPolicy) -> PermissionPolicy:
    """Put every request to the user through ``dialog`` (your UI); an answer that is not one of the
    offered option ids is read as *cancelled*, never as approval."""

    async def policy(request: PermissionRequest) -> str | None:
        choice = await dialog(request)
        return choice if any(o.option_id == choice for o in request.options) else None

    policy.__doc__ = f"ask the user through {getattr(dialog, '__qualname__', repr(dialog))}"
    return policy


#: The documented policies a ``permission=`` may also name: ``"deny"`` and ``"allow_reads"``.
POLICY_NAMES: dict[str, PermissionPolicy] = {"deny": deny, "allow_reads": allow_reads}


def permission_policy(value: object, *, name: str = "permission") -> PermissionPolicy:
    """``value`` as a policy: a callable as it is, or the name of a documented one (:data:`POLICY_NAMES`).
    Anything else (``"allow"``, a bool, ``None``) raises :class:`~acp_client.exceptions.UsageError` naming
    the keyword: there is no "allow everything" name, write that policy yourself if you mean it."""
    if isinstance(value, str):
        policy = POLICY_NAMES.get(value)
        if policy is None:
            names = ", ".join(repr(n) for n in POLICY_NAMES)
            raise UsageError(f"{name} must be a policy callable or one of {names}, not {value!r}")
        return policy
    if not callable(value):
        raise UsageError(f"{name} must be a policy callable (async (PermissionRequest) -> option id), not {value!r}")
    return value
