"""The README's snippet, run against the reference agent from an installed wheel (the CI's wheel step).

Run it with the Python of a fresh virtualenv that holds the wheel alone, from a folder outside the checkout
(``.ci/run`` does). It checks first that ``acp_client`` is the installed one, not a checkout's, then starts
``python -m acp_client.testing.reference_agent`` on 127.0.0.1, and does what the README shows: a
``ReconnectingClient`` with a ``SQLiteSessionStore``, ``new_session``, ``prompt``, the transcript and the event
stream, where a dropped link must end in a ``SessionRecovered``. Every wait is bounded; any failure exits
non-zero with the reason on stderr.

    python scripts/wheel_smoke.py [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path


def check_installed() -> str:
    """The path ``acp_client`` was imported from; exit 1 unless it lies in this interpreter's site-packages."""
    import acp_client

    location = Path(acp_client.__file__).resolve().parent
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    if not location.is_relative_to(site_packages):
        sys.exit(f"FAIL: acp_client was imported from {location}, not from the installed wheel in {site_packages}")
    if not (location / "py.typed").is_file():
        sys.exit(f"FAIL: the installed package has no py.typed ({location})")
    return str(location)


def start_agent(timeout: float) -> tuple[subprocess.Popen[str], str]:
    """The reference agent in a process of its own, and the URL it prints once it listens."""
    argv = [sys.executable, "-m", "acp_client.testing.reference_agent", "--host", "127.0.0.1", "--port", "0"]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    stdout = agent.stdout
    url: list[str] = []
    reader = threading.Thread(target=lambda: url.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not url:
        agent.kill()
        sys.exit(f"FAIL: the reference agent printed no URL within {timeout:g} s")
    if not url[0].startswith("ws://"):
        agent.kill()
        sys.exit(f"FAIL: the reference agent printed {url[0]!r} instead of its URL (exit code {agent.poll()})")
    return agent, url[0].strip()


async def readme_snippet(url: str, folder: Path) -> None:
    """The README's "In code" sample, ended by a dropped link and its recovery instead of running forever."""
    from acp_client import ReconnectingClient, SessionRecovered, SQLiteSessionStore

    store = SQLiteSessionStore(str(folder / "sessions.db"))
    async with ReconnectingClient(url, store=store) as client:
        session = await client.new_session(str(folder))
        result = await session.prompt("echo: Summarise the README", timeout=10)
        print(result.stop_reason, session.transcript.text().strip())
        if result.stop_reason != "end_turn" or "Summarise the README" not in session.transcript.text():
            raise SystemExit(f"FAIL: unexpected turn: {result.stop_reason} {session.transcript.text()!r}")
        events = client.events()  # subscribed before the drop, so the recovery cannot be missed
        client.reconnect_now()
        async for event in events:
            print(type(event).__name__)
            if isinstance(event, SessionRecovered) and event.session_id == session.id:
                break
        again = await session.prompt("echo: still there", timeout=10)
        print(again.stop_reason, session.link.value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on the whole run (default 60 s)")
    args = parser.parse_args()
    print("acp_client from", check_installed())
    agent, url = start_agent(args.timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="acp-wheel-smoke-") as folder:

            async def bounded() -> None:
                async with asyncio.timeout(args.timeout):
                    await readme_snippet(url, Path(folder))

            try:
                asyncio.run(bounded())
            except TimeoutError:
                sys.exit(f"FAIL: the README snippet did not finish within {args.timeout:g} s")
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
    print("wheel smoke test: OK")


if __name__ == "__main__":
    main()
