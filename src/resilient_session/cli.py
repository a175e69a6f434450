"""The command line: ``resilient-session check CONFIG``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .config import load
from .errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 failed, 2 bad usage or config)."""
    parser = argparse.ArgumentParser(prog="resilient-session")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="validate a config file")
    check.add_argument("config")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"resilient-session: {exc}", file=sys.stderr)
        return 2
    print(f"{args.config}: ok ({len(config.rules)} host entries)")
    return 0
