"""How agents say things about a session that ACP leaves unnamed: the *dialects* recovery reads.

ACP names one error for a session the agent does not know (``-32002``) and none for a session that is
live but held by another connection. Agents in the field word both their own way, and recovery decides on
those answers between forgetting a session and keeping it. :class:`SessionDialects` is the table of what
the SDK reads, a frozen option object set as ``RecoveryPolicy(dialects=...)``; its defaults are the
dialects seen in the agents people run:

=====================================================  ===================================================
the agent answers                                      read as
=====================================================  ===================================================
``-32023``, or ``data.errorKind``                      *elsewhere*: live, owned by another connection;
``"session_writer_unavailable"`` (qwen-code)           retried, never forgotten
a ``-32602``/``-32603``/``-32600`` saying "not         *elsewhere* (the reference agent, others)
attached", "attached to another connection" ...
a ``-32602``/``-32603``/``-32600`` whose message, or   *unknown*: the agent does not know the session;
a string in ``data``, says "Session not found" (kimi:  the strategy is asked as for ``-32002``
``data {"session_id": "Session not found"}``), "No
session with id" (qwen over HTTP), "Invalid session
identifier", "Resource not found: session:<id>",
"Unknown session", "session ... does not exist"
anything else                                          *other*: checked against ``session/list``
=====================================================  ===================================================

The ``session/list`` check (``not_listed``) asks for the session's own ``cwd`` (``list_with_cwd``; kimi
lists nothing without one), and a listing that names no session at all proves nothing
(``empty_list_proves_absent``): an agent that lists only what it touched since it started would otherwise
make every live session look absent. An agent that answers ``session/load`` of an unknown id with success
(pydantic-acp creates a fresh, empty session under that id) is caught by ``verify_empty_replay``: a
replaying re-attach that brought back no update is checked against ``session/list`` the same way.

``-32002`` and the codes of ``RecoveryPolicy.unknown_session_codes`` are read as *unknown* before any of
this (they need no words).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from acp_client.exceptions import RPCError, UsageError

__all__ = ["DEFAULT_DIALECTS", "SessionDialects", "SessionErrorKind", "read_session_error"]

#: What an agent's error says about a session: unknown to it, live on another connection, or neither.
SessionErrorKind = Literal["unknown", "elsewhere", "other"]

_UNKNOWN_PHRASES = (
    r"\bsession not found\b",
    r"\bno session with id\b",
    r"\binvalid session (?:id|identifier)\b",
    r"\bresource not found: session\b",
    r"\bunknown session\b",
    r"\bsession\b[^.;]{0,80}\b(?:does not|doesn't|no longer) exists?\b",
)
_ELSEWHERE_PHRASES = (
    r"\b(?:not|already) attached\b",
    r"\battached (?:to|on|by) (?:another|a different|some other)\b",
    r"\b(?:another|a different|some other) (?:connection|client)\b",
)
#: ACP names no code for either answer: invalid params, internal error, invalid request are what agents use.
_PHRASE_CODES = frozenset({-32602, -32603, -32600})


def _codes(owner: str, name: str, value: object) -> frozenset[int]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise UsageError(f"{owner}.{name} must be ints, not {value!r}")
    codes = frozenset(value)
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        raise UsageError(f"{owner}.{name} must be ints, not {value!r}")
    return codes


def _phrases(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise UsageError(f"SessionDialects.{name} must be regular expressions (strings), not {value!r}")
    phrases = tuple(value)
    for phrase in phrases:
        if not isinstance(phrase, str):
            raise UsageError(f"SessionDialects.{name} must be regular expressions (strings), not {phrase!r}")
        try:
            re.compile(phrase)
        except re.error as exc:
            raise UsageError(f"SessionDialects.{name}: {phrase!r} is not a regular expression ({exc})") from None
    return phrases


@dataclass(frozen=True, slots=True)
class SessionDialects:
    """What recovery reads in an agent's answers about a session (see the module docstring).

    ``unknown_phrases`` (regular expressions, matched case-insensitively)
        words saying "this session is unknown", looked for in the message and in every string of ``data``
        (its top-level values when it is an object) of an error whose code is in ``phrase_codes``.
    ``elsewhere_phrases`` (regular expressions)
        words saying "this session is attached to another connection", read the same way.
    ``phrase_codes`` (default ``{-32602, -32603, -32600}``)
        the codes whose words are read (other codes say what their code says).
    ``elsewhere_codes`` (default ``{-32023}``)
        codes that alone mean "live, owned by another connection".
    ``elsewhere_kinds`` (default ``{"session_writer_unavailable"}``)
        ``data.errorKind`` values meaning the same, whatever the code.
    ``list_with_cwd`` (default ``True``)
        the ``session/list`` check asks for the session's own ``cwd``.
    ``empty_list_proves_absent`` (default ``False``)
        whether a listing that names no session at all proves the session absent.
    ``verify_empty_replay`` (default ``True``)
        a re-attach that asked for a replay and got no update is checked against ``session/list``; a
        session the agent does not list (in a listing that is not empty) is then forgotten as
        ``not_listed``.

    *Elsewhere* is read before *unknown*. Change a copy with :func:`dataclasses.replace`, e.g. to add a
    phrase: ``replace(DEFAULT_DIALECTS, unknown_phrases=(*DEFAULT_DIALECTS.unknown_phrases, r"gone"))``.
    """

    unknown_phrases: tuple[str, ...] = _UNKNOWN_PHRASES
    elsewhere_phrases: tuple[str, ...] = _ELSEWHERE_PHRASES
    phrase_codes: frozenset[int] = field(default=_PHRASE_CODES)
    elsewhere_codes: frozenset[int] = field(default=frozenset({-32023}))
    elsewhere_kinds: frozenset[str] = field(default=frozenset({"session_writer_unavailable"}))
    list_with_cwd: bool = True
    empty_list_proves_absent: bool = False
    verify_empty_replay: bool = True
    _unknown: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _elsewhere: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = _phrases("unknown_phrases", self.unknown_phrases)
        elsewhere = _phrases("elsewhere_phrases", self.elsewhere_phrases)
        object.__setattr__(self, "unknown_phrases", unknown)
        object.__setattr__(self, "elsewhere_phrases", elsewhere)
        object.__setattr__(self, "phrase_codes", _codes("SessionDialects", "phrase_codes", self.phrase_codes))
        object.__setattr__(self, "elsewhere_codes", _codes("SessionDialects", "elsewhere_codes", self.elsewhere_codes))
        kinds: object = self.elsewhere_kinds
        if (
            isinstance(kinds, str | bytes)
            or not isinstance(kinds, Iterable)
            or not all(isinstance(k, str) for k in kinds)
        ):
            raise UsageError(f"SessionDialects.elsewhere_kinds must be strings, not {kinds!r}")
        object.__setattr__(self, "elsewhere_kinds", frozenset(kinds))
        for name in ("list_with_cwd", "empty_list_proves_absent", "verify_empty_replay"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"SessionDialects.{name} must be True or False, not {getattr(self, name)!r}")
        object.__setattr__(self, "_unknown", _compile(unknown))
        object.__setattr__(self, "_elsewhere", _compile(elsewhere))

    def read(self, error: BaseException) -> SessionErrorKind:
        """What ``error``, an agent's answer to a call about one session, says about that session."""
        if not isinstance(error, RPCError):
            return "other"
        data = error.data
        kind = data.get("errorKind") if isinstance(data, dict) else None
        if error.code in self.elsewhere_codes or (isinstance(kind, str) and kind in self.elsewhere_kinds):
            return "elsewhere"
        if error.code not in self.phrase_codes:
            return "other"
        texts = _texts(error)
        if self._elsewhere is not None and any(self._elsewhere.search(t) for t in texts):
            return "elsewhere"
        if self._unknown is not None and any(self._unknown.search(t) for t in texts):
            return "unknown"
        return "other"


def _compile(phrases: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in phrases), re.IGNORECASE) if phrases else None


def _texts(error: RPCError) -> list[str]:
    texts = [error.message]
    data = error.data
    if isinstance(data, str):
        texts.append(data)
    elif isinstance(data, dict):
        texts += [value for value in data.values() if isinstance(value, str)]
    return texts


#: The built-in dialects (``RecoveryPolicy().dialects``).
DEFAULT_DIALECTS = SessionDialects()


def read_session_error(error: BaseException, dialects: SessionDialects = DEFAULT_DIALECTS) -> SessionErrorKind:
    """``dialects.read(error)``: ``"unknown"``, ``"elsewhere"`` or ``"other"``."""
    return dialects.read(error)
