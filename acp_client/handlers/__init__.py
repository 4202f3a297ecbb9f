"""What the client answers when the agent asks it something (agent→client requests).

:class:`ClientHandlers` is the base: override what your application supports; everything else gets a safe
default (permission *cancelled*, ``fs``/``terminal`` ``-32601``, elicitation declined). :class:`Workspace`
is a ready one that serves the agent's file system and terminals confined to a set of directories, with
the permission policies :func:`ask`, :func:`allow_reads` and :func:`deny`.
"""

from acp_client.handlers._base import (
    EXTENSION_KEY,
    EXTENSION_PREFIX,
    ClientHandlers,
    ElicitationRequest,
    PermissionOption,
    PermissionRequest,
    TerminalExit,
    TerminalOutput,
    dispatch_request,
)
from acp_client.handlers._permission import READ_KINDS, PermissionPolicy, allow_reads, ask, deny, request_kind
from acp_client.handlers._refusal import RULES, WorkspaceRefusal
from acp_client.handlers.workspace import BeforeWrite, BufferLookup, PendingWrite, Workspace

__all__ = [
    "EXTENSION_KEY",
    "EXTENSION_PREFIX",
    "READ_KINDS",
    "RULES",
    "BeforeWrite",
    "BufferLookup",
    "ClientHandlers",
    "ElicitationRequest",
    "PendingWrite",
    "PermissionOption",
    "PermissionPolicy",
    "PermissionRequest",
    "TerminalExit",
    "TerminalOutput",
    "Workspace",
    "WorkspaceRefusal",
    "allow_reads",
    "ask",
    "deny",
    "dispatch_request",
    "request_kind",
]
