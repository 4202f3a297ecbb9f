"""The blocking facade keeps the async API whole: every method and parameter, typed errors unchanged,
KeyboardInterrupt cancels the turn, and a client used outside ``with`` connects on first use."""

from __future__ import annotations

import asyncio
import inspect
import pydoc
import signal
import threading
from typing import Any

import pytest

import acp_client
from acp_client import (
    ACPClient,
    ACPTimeoutError,
    AgentNotFound,
    ClientState,
    ReconnectFailed,
    Session,
    SessionUpdate,
    StateChanged,
    StateUpdate,
    Timeouts,
    sync,
)
from acp_client import ReconnectingClient as AsyncReconnectingClient
from acp_client.testing import FAST_RETRY, AgentThread
from tests.conftest import bound

#: async name -> why it has no blocking twin of the same name
NOT_MIRRORED = {
    "aclose": "close() is its twin",
    "start": "the blocking clients start on with/first use",
    "initialize": "sync.connect() initializes",
    "initialize_params": "a helper of initialize",
    "current": "the per-connection async client is of no use to blocking code",
    "accept_updates": "a session owner's routing window, opened and closed on the client's loop",
}

PAIRS = [(ACPClient, sync.SyncClient), (AsyncReconnectingClient, sync.ReconnectingClient), (Session, sync.SyncSession)]


def _public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in inspect.getmembers(cls) if not name.startswith("_")}


def _parameters(member: Any) -> dict[str, tuple[Any, Any]]:
    """Parameter name -> (kind, default), without ``self``."""
    params = list(inspect.signature(member).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return {p.name: (p.kind, p.default) for p in params}


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_async_method_and_parameter_has_a_blocking_twin(async_cls: type, sync_cls: type) -> None:
    blocking = _public(sync_cls)
    missing, different = [], []
    for name, member in _public(async_cls).items():
        if name in NOT_MIRRORED:
            continue
        if name not in blocking:
            missing.append(name)
            continue
        if isinstance(inspect.getattr_static(async_cls, name), property):
            continue  # a property: present is enough
        theirs, ours = _parameters(member), _parameters(blocking[name])
        for param, spec in theirs.items():
            if ours.get(param) != spec:
                different.append(f"{name}({param}): async {spec}, blocking {ours.get(param)}")
    assert missing == [], f"{sync_cls.__name__} lacks {missing}"
    assert different == []


def _blocking_return(annotation: Any) -> Any:
    """What a blocking method returns for an async method's return annotation."""
    if annotation == "Session":
        return "SyncSession"
    if isinstance(annotation, str) and annotation.startswith("AsyncIterator["):
        return "list[" + annotation.removeprefix("AsyncIterator[")
    return annotation


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_blocking_method_has_a_real_signature_matching_its_async_twin(async_cls: type, sync_cls: type) -> None:
    """``inspect.signature`` works on the class attribute and on the bound method; the parameters are the
    async method's (names, kinds, defaults), and the return annotation names the blocking type."""
    compared = 0
    for name, member in _public(sync_cls).items():
        if isinstance(inspect.getattr_static(sync_cls, name), property) or not hasattr(async_cls, name):
            continue
        assert inspect.isfunction(member), f"{sync_cls.__name__}.{name} is a {type(member).__name__}"
        assert member.__name__ == name
        assert member.__qualname__ == f"{sync_cls.__name__}.{name}"
        assert member.__doc__, f"{sync_cls.__name__}.{name} has no docstring"
        ours, theirs = inspect.signature(member), inspect.signature(getattr(async_cls, name))
        if name in ("events", "updates"):  # a blocking generator: one more parameter, bounding each wait
            extra = _parameters(member)
            assert extra.pop("timeout") == (inspect.Parameter.POSITIONAL_OR_KEYWORD, None)
            assert extra == _parameters(getattr(async_cls, name)), name
            assert str(ours.return_annotation).startswith("Generator["), name
            compared += 1
            continue
        assert _parameters(member) == _parameters(getattr(async_cls, name)), name
        if name not in ("close", "wait_ready", "notify_resumed_from_sleep"):
            assert ours.return_annotation == _blocking_return(theirs.return_annotation), name
        compared += 1
    assert compared >= 3


@pytest.mark.parametrize(
    ("blocking", "forwarded_to"),
    [(sync.ReconnectingClient, AsyncReconnectingClient), (sync.connect, acp_client.connect)],
    ids=["ReconnectingClient", "connect"],
)
def test_forwarded_keywords_are_spelled_out(blocking: Any, forwarded_to: Any) -> None:
    ours = inspect.signature(blocking).parameters
    for name, parameter in inspect.signature(forwarded_to).parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            assert ours[name].default == parameter.default, name
    assert next(iter(ours)) == "target"


def test_help_reads_like_the_async_one() -> None:
    text = pydoc.render_doc(sync.ReconnectingClient, renderer=pydoc.plaintext)
    assert "object at 0x" not in text  # no descriptor objects, no bare sentinel
    assert "new_session(self, cwd: 'str | os.PathLike[str]', *," in text
    assert "-> 'SyncSession'" in text
    assert (
        "list_sessions(self, cwd: 'str | None' = None, *, timeout: 'RequestTimeout' = USE_CLIENT_DEFAULT, "
        "archived: \"Literal['exclude', 'include', 'only'] | None\" = None) -> 'list[SessionInfo]'"
        in text
    )
    assert AsyncReconnectingClient.new_session.__doc__.splitlines()[0] in text  # type: ignore[union-attr]


def test_the_shared_wrapper_copies_name_signature_and_docstring() -> None:
    with AgentThread(2, timeout=bound(15)) as host, sync.connect(host.agent.url) as client:
        signature = inspect.signature(client.new_session)
        assert list(signature.parameters) == list(inspect.signature(ACPClient.new_session).parameters)[1:]
        assert signature.return_annotation == "SyncSession"
        assert client.new_session.__doc__ == ACPClient.new_session.__doc__
        assert client.new_session.__name__ == "new_session"
        assert isinstance(client.new_session("/work"), sync.SyncSession)


def test_a_typed_timeout_reaches_the_caller_unchanged() -> None:
    for version in (1, 2):
        with AgentThread(version, timeout=bound(15)) as host, sync.connect(host.agent.url) as client:
            session = client.new_session("/work")
            with pytest.raises(ACPTimeoutError) as caught:
                session.prompt("sleep 20", timeout=0.5)
            assert type(caught.value) is ACPTimeoutError
            assert "within 0.5 s" in str(caught.value)
            assert "blocking call" not in str(caught.value)  # the async API's error, not the facade's
            session.cancel()


def test_the_facade_bound_is_typed_too() -> None:
    runner = sync._LoopThread("test-loop")
    try:

        async def stuck() -> None:
            await asyncio.sleep(30)

        with pytest.raises(ACPTimeoutError, match=r"blocking call did not finish within 0\.2 s"):
            runner.run(stuck(), 0.2)

        async def typed() -> None:
            raise ACPTimeoutError("from the call")

        with pytest.raises(ACPTimeoutError, match="from the call"):
            runner.run(typed(), 10)
    finally:
        runner.stop()


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
def test_keyboard_interrupt_during_a_prompt_cancels_the_turn(version: int) -> None:
    main = threading.get_ident()
    assert main == threading.main_thread().ident, "the interrupt must reach the thread that prompts"
    # Python's own Ctrl-C handler, whatever the runner inherited: a test run started in the background of a
    # non-interactive shell (``nohup``, ``cmd &``, some CI launchers) starts with SIGINT ignored, and then the
    # signal below never becomes a KeyboardInterrupt (the prompt ran its 20 s to the end: "DID NOT RAISE").
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt_a_prompt(version, main)
    finally:
        signal.signal(signal.SIGINT, inherited)


def interrupt_a_prompt(version: int, main: int) -> None:
    with AgentThread(version, timeout=bound(15)) as host, sync.connect(host.agent.url) as client:
        session = client.new_session("/work")
        agent = host.agent
        failures: list[BaseException] = []

        def press_stop() -> None:
            try:

                def turn_running() -> bool:
                    record = agent.sessions.get(session.id)
                    return record is not None and record.turn is not None and record.turn.accepted

                host.call(agent.wait_for(turn_running, timeout=bound(10)))
            except BaseException as exc:
                failures.append(exc)
            else:
                signal.pthread_kill(main, signal.SIGINT)  # what Ctrl-C or a notebook's stop button does

        stream = session.updates(timeout=bound(10))  # to see the interrupted turn end on the client too
        presser = threading.Thread(target=press_stop)
        presser.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                session.prompt("sleep 20", timeout=bound(30))
        finally:
            presser.join(bound(15))
        assert failures == []
        host.call(agent.wait_for(lambda: agent.count("session/cancel", session.id) == 1, timeout=bound(10)))
        host.call(agent.wait_for(lambda: agent.sessions[session.id].turn is None, timeout=bound(10)))
        assert agent.sessions[session.id].stop_reason == "cancelled"
        if version >= 2:  # the turn's final idle update may still be on its way: let it arrive first
            for item in stream:
                if (
                    isinstance(item, SessionUpdate)
                    and isinstance(item.typed, StateUpdate)
                    and item.typed.state == "idle"
                ):
                    break
        stream.close()
        # the client stays usable
        assert session.prompt("echo: after", timeout=bound(10)).stop_reason == "end_turn"


def test_a_reconnecting_client_outside_with_connects_on_first_use() -> None:
    with AgentThread(2, timeout=bound(15)) as host:
        client = sync.ReconnectingClient(host.agent.url, **FAST_RETRY)
        try:
            assert client.state is ClientState.IDLE  # nothing happens before it is used
            session = client.new_session("/work", meta={"title": "first"})
            assert client.state is ClientState.READY
            assert session.record.meta == {"title": "first"}
            assert session.prompt("echo: hi", timeout=bound(10)).stop_reason == "end_turn"
            assert [info.session_id for info in client.list_sessions()] == [session.id]
        finally:
            client.close()
        assert client.closed


def test_session_arguments_are_unwrapped() -> None:
    with AgentThread(2, timeout=bound(15)) as host, sync.ReconnectingClient(host.agent.url, **FAST_RETRY) as client:
        session = client.new_session("/work", meta={"n": 1})
        session.record.meta["n"] = 2
        client.save_session(session)  # takes the blocking handle, passes the async one
        assert client.sessions[session.id] is session


def test_first_use_of_a_client_whose_agent_cannot_start_raises_at_once() -> None:
    client = sync.ReconnectingClient(["no-such-agent-7f3e", "--stdio"], timeouts=Timeouts(ready=bound(30)))
    try:
        with pytest.raises(ReconnectFailed) as caught:
            client.new_session("/work")
        assert isinstance(caught.value.cause, AgentNotFound)
        assert "no-such-agent-7f3e" in str(caught.value)
    finally:
        client.close()


def test_subscribing_to_events_starts_the_client_and_sees_its_first_connection() -> None:
    with AgentThread(2, timeout=bound(15)) as host:
        client = sync.ReconnectingClient(host.agent.url, **FAST_RETRY)
        try:
            events = client.events(timeout=bound(10))
            for event in events:
                if isinstance(event, StateChanged) and event.new is ClientState.READY:
                    break
            events.close()
            assert client.state is ClientState.READY
        finally:
            client.close()
