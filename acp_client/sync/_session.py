"""The blocking session handle, :class:`SyncSession`."""

from __future__ import annotations

import collections
from collections.abc import Generator
from typing import Any

from acp_client.sessions import (
    DEFAULT_UPDATES_BUFFER,
    PromptLedger,
    Session,
    SessionLink,
    SessionRecord,
    StreamItem,
    Transcript,
)
from acp_client.sync._runner import _LoopThread, _subscribe
from acp_client.sync._wrap import _Blocking, _OnLoop, _Prompt, _Twin


class SyncSession(_Twin):
    """A blocking handle on a :class:`~acp_client.sessions.Session` (stable across reconnects like it).

    Every method of the async handle exists here with the same parameters; ``updates`` is a blocking
    generator. ``KeyboardInterrupt`` during :meth:`prompt` sends ``session/cancel`` and is re-raised.
    """

    def __init__(self, runner: _LoopThread, session: Session) -> None:
        self._runner = runner
        #: The underlying async handle (use it only from the client's loop).
        self.session = session

    def __repr__(self) -> str:
        return f"<SyncSession {self.session.id} {self.session.link.value}>"

    @property
    def _target(self) -> Session:
        return self.session

    def _as_argument(self) -> Any:
        return self.session

    @property
    def id(self) -> str:
        """The agent's session id."""
        return self.session.id

    @property
    def cwd(self) -> str:
        """The session's working directory."""
        return self.session.cwd

    @property
    def available_commands(self) -> list[dict[str, Any]] | None:
        """The agent's slash commands for this session, as last reported (``None`` until it says)."""
        return self.session.available_commands

    @property
    def config_options(self) -> list[dict[str, Any]] | None:
        """The session's config options as the agent last reported them (``None`` until it says)."""
        return self.session.config_options

    @property
    def state(self) -> str | None:
        """v2 foreground state (``idle``, ``running``, ...), ``None`` when unknown and always in v1."""
        return self.session.state

    @property
    def replaying(self) -> bool:
        """``True`` while a resume or load for this session is outstanding."""
        return self.session.replaying

    @property
    def link(self) -> SessionLink:
        """Where the session stands with respect to the current connection."""
        return self.session.link

    @property
    def transcript(self) -> Transcript:
        """The conversation as the client knows it (updated by the client's loop thread)."""
        return self.session.transcript

    @property
    def stats(self) -> collections.Counter[str]:
        """Updates received for this session, ``live`` and ``replayed`` (a new counter at each read)."""
        return self.session.stats

    @property
    def record(self) -> SessionRecord:
        """What is persisted to re-attach the session (its ``meta`` included)."""
        return self.session.record

    @property
    def current_mode(self) -> str | None:
        """The session's current mode id (v1), ``None`` until the agent says."""
        return self.session.current_mode

    @property
    def desired_config(self) -> dict[str, Any]:
        """The mode and config options the application set (set again after a restore)."""
        return self.session.desired_config

    @property
    def prompt_ledger(self) -> PromptLedger:
        """The session's prompt ledger (written by the client's loop thread; read its entries' ``state``)."""
        return self.session.prompt_ledger

    prompt = _Prompt(Session.prompt, needs_connection=False)
    resend = _Prompt(Session.resend, needs_connection=False)
    set_config_option = _Blocking(Session.set_config_option, needs_connection=False)
    set_mode = _Blocking(Session.set_mode, needs_connection=False)
    send_prompt = _Blocking(Session.send_prompt, needs_connection=False)
    cancel = _Blocking(Session.cancel, needs_connection=False)
    cancel_tool_call = _Blocking(Session.cancel_tool_call, needs_connection=False)
    on_turn_finished = _OnLoop(Session.on_turn_finished)

    def updates(
        self, timeout: float | None = None, *, maxsize: int = DEFAULT_UPDATES_BUFFER
    ) -> Generator[StreamItem, None, None]:
        """Block over this session's stream (updates, recovery markers, overflow notices) from now on.

        The subscription starts at this call. ``timeout`` bounds the wait for each item: when it passes, the
        generator raises ``ACPTimeoutError``. It ends when the session is lost or closed; ``close()`` it to
        unsubscribe early.
        """
        return _subscribe(self._runner, lambda: self.session.updates(maxsize=maxsize), timeout)
