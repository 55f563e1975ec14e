"""The ``qonnect`` command.

Each subcommand lives in its own module under ``qonnect_gitops.cli`` and
exposes ``register(subparsers)``; the module adds its parser and sets
``handler`` to a function taking the parsed arguments and returning the exit
code. Adding a command is adding a module and one name to ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from qonnect_gitops import __version__

# Module names under qonnect_gitops.cli, in the order `qonnect --help` lists them.
COMMANDS: tuple[str, ...] = (
    "validate",
    "schema",
    "plan",
    "preview",
    "reconcile",
    "proposals",
    "approve",
    "lead",
    "status",
    "members",
    "token",
    "agent",
    "observer",
    "sim",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="qonnect",
        description="QoS-aware GitOps placement across Kubernetes and K3s clusters.",
    )
    parser.add_argument("--version", action="version", version=f"qonnect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"qonnect_gitops.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``qonnect`` command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `qonnect schema | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        return 0
