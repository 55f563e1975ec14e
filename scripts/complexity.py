#!/usr/bin/env python3
"""The complexity ratchet: no function of the package grows more complex than it is today.

Every function and method of ``qonnect_gitops`` (nested functions too) has a cyclomatic
complexity, as radon counts it (branches, loops, boolean operators, handlers,
comprehensions). One over ``THRESHOLD`` must be listed in ``BASELINE`` with a value at
least its own: a new function over the threshold, or a listed one that grew, fails the
check. The baseline may only shrink: a listed function that got simpler, fell under the
threshold or is gone fails the check too, until its entry is lowered or removed
(``--update`` does that and never raises or adds an entry). Accepting a complex
function on purpose is ``--add``, done in review (docs/contributing.md).

    scripts/complexity.py                  # check (scripts/check runs this)
    scripts/complexity.py --update         # lower and remove entries that improved
    scripts/complexity.py --add KEY...     # record these as they are now (path::name, a file or a folder)
    scripts/complexity.py --grades         # count today's functions per radon grade
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import cc_rank
from radon.visitors import Class, ComplexityVisitor, Function

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "qonnect_gitops"
BASELINE = ROOT / "scripts" / "complexity-baseline.txt"
# Radon's grade A and B end at 10 (mccabe's and ruff's default limit too); 11 and up is
# grade C, "moderately complex" and worse.
THRESHOLD = 10
HEADER = f"""\
# The complexity ratchet's baseline (scripts/complexity.py, docs/contributing.md): every
# function of {PACKAGE} whose cyclomatic complexity (radon) is over {THRESHOLD}, with the
# complexity it may not exceed. Entries may only go down or away: `scripts/complexity.py
# --update` lowers them; adding one is `--add path::name`, decided in review.
"""


@dataclass(frozen=True)
class Measured:
    """One function as it is today: where it is and how complex."""

    key: str  # path/to/module.py::Class.method (nested functions as outer.inner)
    complexity: int
    line: int


def _blocks(prefix: str, blocks: Iterable[Function | Class]) -> Iterator[tuple[str, Function]]:
    for block in blocks:
        name = f"{prefix}{block.name}"
        if isinstance(block, Class):
            yield from _blocks(f"{name}.", [*block.methods, *block.inner_classes])
        else:
            yield name, block
            yield from _blocks(f"{name}.", block.closures)


def measure(root: Path | None = None) -> dict[str, Measured]:
    """Every function of the package under ``root`` (this checkout), by key. A name
    defined twice in one scope (a property's getter and setter) gets ``#2`` after the
    second, in source order."""
    root = root or ROOT
    found: dict[str, Measured] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        visitor = ComplexityVisitor.from_code(path.read_text(encoding="utf-8"))
        for name, function in _blocks("", [*visitor.functions, *visitor.classes]):
            key, n = f"{rel}::{name}", 1
            while key in found:
                n += 1
                key = f"{rel}::{name}#{n}"
            found[key] = Measured(key, function.complexity, function.lineno)
    return found


def read_baseline(path: Path | None = None) -> dict[str, int]:
    """The recorded ceilings: ``key complexity`` per line, ``#`` comments."""
    path = path or BASELINE
    entries: dict[str, int] = {}
    if not path.exists():
        return entries
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if not key or not value.isdigit() or key in entries:
            raise SystemExit(f"{path}:{number}: expected 'path.py::name complexity' once per function, got {raw!r}")
        entries[key] = int(value)
    return entries


def write_baseline(entries: dict[str, int], path: Path | None = None) -> None:
    """Write the entries sorted by key, one a line, so parallel branches merge line by line."""
    lines = "".join(f"{key} {entries[key]}\n" for key in sorted(entries))
    (path or BASELINE).write_text(HEADER + lines, encoding="utf-8")


@dataclass(frozen=True)
class Findings:
    """What the check found: ``worse`` fails until the code is simpler (or ``--add``);
    ``better`` fails until the baseline is lowered (``--update``)."""

    worse: list[str]
    better: list[str]


def compare(measured: dict[str, Measured], baseline: dict[str, int]) -> Findings:
    """Each function against its baseline entry, and each entry against the code."""
    worse: list[str] = []
    better: list[str] = []
    for key, m in sorted(measured.items()):
        ceiling = baseline.get(key)
        where = f"{key.split('::')[0]}:{m.line}: {key.split('::', 1)[1]}"
        if m.complexity > THRESHOLD and ceiling is None:
            worse.append(f"{where}: complexity {m.complexity}, over {THRESHOLD} and not in the baseline")
        elif ceiling is not None and m.complexity > ceiling:
            worse.append(f"{where}: complexity {m.complexity}, above its baseline {ceiling}")
        elif ceiling is not None and m.complexity < ceiling:
            now = f"now {m.complexity}" if m.complexity > THRESHOLD else f"now {m.complexity}, within {THRESHOLD}"
            better.append(f"{where}: baseline {ceiling}, {now}")
    better += [f"{key}: in the baseline, no longer in the code" for key in sorted(baseline.keys() - measured.keys())]
    return Findings(worse, better)


def update(measured: dict[str, Measured], baseline: dict[str, int]) -> dict[str, int]:
    """The baseline with every entry lowered to today's value, and entries of functions
    that are gone or within the threshold removed. Never raises or adds one."""
    lowered = {key: min(ceiling, measured[key].complexity) for key, ceiling in baseline.items() if key in measured}
    return {key: value for key, value in lowered.items() if value > THRESHOLD}


def add(measured: dict[str, Measured], baseline: dict[str, int], selectors: list[str]) -> dict[str, int]:
    """The baseline with the selected functions over the threshold recorded at today's
    value. A selector is a key (``path.py::name``), a file or a folder of the package."""
    chosen: set[str] = set()
    for selector in selectors:
        folder = selector.rstrip("/") + "/"
        matched = {key for key in measured
                   if key == selector or key.split("::")[0] == selector or key.startswith(folder)}
        if not matched:
            raise SystemExit(f"scripts/complexity.py: {selector} names no function of {PACKAGE}")
        chosen |= matched
    return {**baseline, **{key: measured[key].complexity for key in chosen if measured[key].complexity > THRESHOLD}}


def grades(measured: dict[str, Measured]) -> str:
    """How many functions have each radon grade, and the totals the issue counts by."""
    count = Counter(cc_rank(m.complexity) for m in measured.values())
    per_grade = ", ".join(f"{g} {count[g]}" for g in "ABCDEF")
    c_or_worse = sum(count[g] for g in "CDEF")
    d_or_worse = sum(count[g] for g in "DEF")
    return (f"{len(measured)} functions: {per_grade}; "
            f"C or worse (over {THRESHOLD}) {c_or_worse}, D or worse (over 20) {d_or_worse}")


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true",
                      help="lower the baseline to today's values; remove entries now within the threshold or gone")
    mode.add_argument("--add", nargs="+", metavar="KEY",
                      help="record these functions at today's value (path.py::name, a file or a folder)")
    mode.add_argument("--grades", action="store_true", help="count functions per radon grade and exit")
    opts = parser.parse_args(argv)
    measured = measure()
    if opts.grades:
        print(grades(measured))
        return 0
    baseline = read_baseline()
    if opts.update or opts.add:
        new = update(measured, baseline) if opts.update else add(measured, baseline, opts.add)
        changed = sorted(k for k in new.keys() | baseline.keys() if new.get(k) != baseline.get(k))
        for key in changed:
            print(f"{key}: {baseline.get(key, '-')} -> {new.get(key, '-')}")
        write_baseline(new)
        print(f"{_shown(BASELINE)}: {len(changed)} entries changed, {len(new)} entries")
        baseline = new
    found = compare(measured, baseline)
    for line in found.worse:
        print(line, file=sys.stderr)
    if found.worse:
        print(f"complexity: {len(found.worse)} function(s) more complex than allowed. Split them into named steps "
              f"until each is within its baseline (or within {THRESHOLD} for a new one); accepting one as it is "
              f"is `scripts/complexity.py --add path.py::name`, decided in review.", file=sys.stderr)
    for line in found.better:
        print(line, file=sys.stderr)
    if found.better:
        print(f"complexity: {len(found.better)} baseline entr(y/ies) higher than the code needs: run "
              f"`scripts/complexity.py --update` and commit {_shown(BASELINE)} (it only lowers).",
              file=sys.stderr)
    return 1 if found.worse or found.better else 0


if __name__ == "__main__":
    raise SystemExit(main())
