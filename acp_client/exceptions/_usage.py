"""The agent broke the protocol, or the caller misused the SDK (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from acp_client.exceptions._root import ACPError

__all__ = [
    "CapabilityNotSupported",
    "ClientClosed",
    "PromptNotResendable",
    "ProtocolError",
    "UnsupportedProtocolVersion",
    "UsageError",
]


class ProtocolError(ACPError):
    """The agent broke the protocol: a malformed frame or message, a wrong shape, an impossible answer."""


class UnsupportedProtocolVersion(ProtocolError):
    """The agent answered ``initialize`` with a protocol version this connection does not accept.

    ``accepted`` is what this connection would have taken: the versions the client speaks, and never one
    above ``offered`` (a connection made with ``protocol=1`` accepts only 1).
    """

    def __init__(self, offered: int, answered: object, *, accepted: tuple[int, ...] = (1, 2)) -> None:
        self.offered = offered
        self.answered = answered
        self.accepted = tuple(accepted)
        wanted = " or ".join(str(v) for v in accepted)
        super().__init__(
            f"offered protocol version {offered}, the agent answered {answered!r}; this connection accepts {wanted}"
        )


class UsageError(ACPError):
    """The SDK was used in a way it does not support; the message says what to do instead."""


class CapabilityNotSupported(UsageError):
    """The agent did not advertise the capability a call needs, so nothing was sent."""

    def __init__(
        self, method: str, capability: str | None, protocol_version: int | None = None, *, hint: str | None = None
    ) -> None:
        self.method = method
        self.capability = capability
        self.protocol_version = protocol_version
        version = f" (protocol v{protocol_version})" if protocol_version is not None else ""
        if capability is None:  # the call does not exist in this protocol version at all
            message = f"{method} does not exist in protocol v{protocol_version}"
        else:
            message = f"{method} needs the agent capability {capability}, which it did not advertise{version}"
        super().__init__(f"{message}; {hint}" if hint else message)


class ClientClosed(UsageError):
    """The client or connection was closed by its owner; it cannot be used or reopened."""


class PromptNotResendable(UsageError):
    """``Session.resend(entry)`` refused: the prompt ledger shows the prompt reached the conversation
    (``inserted`` or ``finished``), is still in flight (``sent``: not classified yet), or was re-sent
    already. Nothing was sent. ``prompt_id`` and ``state`` name the entry and what the ledger shows."""

    def __init__(self, prompt_id: str, state: str, why: str) -> None:
        self.prompt_id = prompt_id
        self.state = state
        super().__init__(f"prompt {prompt_id} is not re-sent: {why} (ledger state {state!r})")
