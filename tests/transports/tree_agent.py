"""A stdio agent that grows a process tree, for the process-group tests of the stdio transport.

``python tree_agent.py --pids FILE [--reexec] [--helper] [--ignore-term] [--stay] [--acp]``

* ``--pids FILE``: every process of the tree appends its pid to FILE (one a line) before it serves.
* ``--reexec``: the started process re-executes itself as a child that inherits (and so keeps) the stdio
  pipes, then waits for it and exits with its status, as some npm agents do.
* ``--helper``: the serving process starts a helper that holds none of the pipes (stdin/stdout/stderr on
  ``/dev/null``) and sleeps, like a language server an agent starts.
* ``--ignore-term``: every process of the tree ignores SIGTERM (only SIGKILL ends them).
* ``--stay``: the serving process keeps running after its stdin ends (it never exits by itself).
* ``--acp``: the serving process is the reference agent over stdio; otherwise it echoes lines, after a
  first line ``ready``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

_CHILD = "TREE_AGENT_CHILD"

HELPER = (
    "import signal, sys, time\n"
    "if sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(1)\n"
)


def _note_pid(path: str, pid: int) -> None:
    with open(path, "a", encoding="ascii") as handle:
        handle.write(f"{pid}\n")


def _stay() -> None:
    while True:
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pids", required=True)
    parser.add_argument("--reexec", action="store_true")
    parser.add_argument("--helper", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--stay", action="store_true")
    parser.add_argument("--acp", action="store_true")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _note_pid(args.pids, os.getpid())
    if args.reexec and not os.environ.get(_CHILD):
        # the child inherits stdin/stdout/stderr: it is the one that talks; this process only waits
        child = subprocess.run([sys.executable, *sys.argv], env={**os.environ, _CHILD: "1"}, check=False)
        return child.returncode
    if args.helper:
        helper = subprocess.Popen(
            [sys.executable, "-c", HELPER, "1" if args.ignore_term else "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _note_pid(args.pids, helper.pid)
    if args.acp:
        from acp_client.testing.agent._serve import main as serve

        status = serve(["--stdio", "--protocol", "1"])
        if args.stay:
            _stay()
        return status
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
    if args.stay:
        _stay()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
