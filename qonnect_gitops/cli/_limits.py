"""The options that raise the goals tree's limits, shared by every command that loads goals."""

from __future__ import annotations

import argparse

from qonnect_gitops.model.limits import GOALS_LIMIT_OPTIONS, MAX_TREE_BYTES, MAX_TREE_FILES, TreeLimits
from qonnect_gitops.model.parsing import size_text


def _count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number of files") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} files: expected at least 1")
    return n


def _size(value: str) -> int:
    from qonnect_gitops.model.quantity import parse_quantity  # pydantic: not for `--help`

    try:
        size = parse_quantity(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if size < 1 or size != size.to_integral_value():
        raise argparse.ArgumentTypeError(f"'{value}': expected a whole number of bytes, at least 1 "
                                         "(such as 256Mi)")
    return int(size)


def add_goals_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--goals-max-files N`` and ``--goals-max-bytes SIZE``: how large a goals tree is accepted."""
    files_option, bytes_option = GOALS_LIMIT_OPTIONS
    parser.add_argument(files_option, dest="goals_max_files", type=_count, default=MAX_TREE_FILES, metavar="N",
                        help=f"most files a goals tree may hold (default {MAX_TREE_FILES:,}); raise it for a "
                        "fleet whose clusters and components need more")
    parser.add_argument(bytes_option, dest="goals_max_bytes", type=_size, default=MAX_TREE_BYTES, metavar="SIZE",
                        help="most bytes the files of a goals tree may hold together, a quantity such as "
                        f"256Mi (default {size_text(MAX_TREE_BYTES)})")


def goals_limits(args: argparse.Namespace) -> TreeLimits:
    """The goals tree limits the command line asked for."""
    return TreeLimits(files=args.goals_max_files, bytes=args.goals_max_bytes)
