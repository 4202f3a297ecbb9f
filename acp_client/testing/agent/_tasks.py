"""The tasks a :class:`~acp_client.testing.ReferenceAgent` starts: one set, cancelled and awaited on restart
and on exit (:class:`AgentTasks`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from acp_client._logging import get_logger

__all__ = ["AgentTasks"]

_log = get_logger("acp_client.testing.reference_agent")


class AgentTasks:
    """The agent's own tasks (turns, request handlers, delayed closes): the one owner of the set."""

    def __init__(self) -> None:
        """No task yet."""
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Start a task owned by the agent (a failure is logged; cancelled and awaited by :meth:`cancel_all`)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("reference_agent_task_failed", task=task.get_name(), error=repr(task.exception()))

    async def cancel_all(self) -> None:
        """Cancel every task but the caller's own and wait until they ended."""
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
