"""The ``qonnect`` command.

Each subcommand lives in its own module under ``qonnect_gitops.cli`` and
exposes ``register(subparsers)``; the module adds its parser and sets
``handler`` to a function taking the parsed arguments and returning the exit
code. Adding a command is adding a module and one name to ``COMMANDS``.

Starting fast: ``qonnect X`` imports the module of X alone, and a command module imports
at its top only what its parser needs (the rest inside its handler), so ``--help`` and
the start of every process (an agent, a lead, a simulated cluster) do not load the
planner, the simulator, pydantic models or pygit2 they do not use.
tests/test_cli_startup.py checks both.
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


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """Build the argument parser with these subcommands (by default every one)."""
    parser = argparse.ArgumentParser(
        prog="qonnect",
        description="QoS-aware GitOps placement across Kubernetes and K3s clusters.",
    )
    parser.add_argument("--version", action="version", version=f"qonnect {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"qonnect_gitops.cli.{name}").register(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, or None (``qonnect``, ``qonnect --help``, a typo).
    The command is the first argument not starting with ``-``: ``qonnect``'s own options
    (``--help``, ``--version``) take no value."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    return name if name in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``qonnect`` command; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command(argv)
    # Without a known command, every one is listed (help, or the error naming the choices).
    parser = build_parser(COMMANDS if command is None else (command,))
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
