"""The options that configure forges (``--forges FILE``) and the limits of the leader's
previews, shared by ``qonnect lead`` and ``qonnect proposals``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from qonnect_gitops.forge.limits import FORGES_ENV, SandboxLimits

if TYPE_CHECKING:
    from qonnect_gitops.forge import ForgeSettings


def add_forges_argument(parser: argparse.ArgumentParser) -> None:
    """``--forges FILE`` (default ``$QONNECT_FORGES``)."""
    parser.add_argument("--forges", type=Path, default=os.environ.get(FORGES_ENV) or None, metavar="FILE",
                        help="YAML file listing the forges goals may select by name (spec.review.forge.name): "
                        f"type, url, repository and tokenFile of each (default ${FORGES_ENV}; see docs/review.md)")


def forges(args: argparse.Namespace) -> tuple[ForgeSettings, ...]:
    """The forges of ``--forges``; raises GoalsError (file:line) when the file is bad."""
    from qonnect_gitops.forge import load_forges  # pydantic: not for `--help`

    return () if args.forges is None else load_forges(args.forges)


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
        if number <= 0:
            raise argparse.ArgumentTypeError(f"{value}: expected more than 0")
        return number
    return parse


def add_preview_arguments(parser: argparse.ArgumentParser) -> None:
    """The limits of one preview of a goals pull request (``forge.sandbox``)."""
    default = SandboxLimits()
    parser.add_argument("--preview-cpu-seconds", type=_positive(int), default=default.cpu_seconds, metavar="S",
                        help=f"CPU time one preview of a pull request may use (default {default.cpu_seconds})")
    parser.add_argument("--preview-memory-mib", type=_positive(int), default=default.memory_mib, metavar="MIB",
                        help=f"address space of one preview's process (default {default.memory_mib})")
    parser.add_argument("--preview-timeout-seconds", type=_positive(float), default=default.timeout_seconds,
                        metavar="S", help=f"wall-clock time one preview may take (default {default.timeout_seconds:g})")


def preview_limits(args: argparse.Namespace) -> SandboxLimits:
    """The preview limits the command line asked for."""
    return SandboxLimits(cpu_seconds=args.preview_cpu_seconds, memory_mib=args.preview_memory_mib,
                         timeout_seconds=args.preview_timeout_seconds)
