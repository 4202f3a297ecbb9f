"""The ``acp-client`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from acp_client._version import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``acp-client`` console script; returns the exit code."""
    parser = argparse.ArgumentParser(prog="acp-client", description="Agent Client Protocol client SDK tools.")
    parser.add_argument("--version", action="version", version=f"acp-client {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("demo", help="run the reconnect demo against the embedded reference agent")
    args = parser.parse_args(argv)
    if args.command == "demo":
        print("acp-client demo: the reconnect demo is not built yet (see issue 'main job').")
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
