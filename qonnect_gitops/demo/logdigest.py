"""What the stack's processes warned about while a scenario ran, for a failed scenario.

A failed scenario says what it expected and observed; why is in the processes' logs
(``<root>/logs/<process>.log``), and a run that failed on another machine (CI) leaves
only its printed output behind. So the runner marks where every log ends before a
scenario, and when it fails, reads what was written since: each warning, error and
critical event (the key=value lines of ``logs.KeyValueFormatter``) and each Python
traceback, grouped by event with a count, the processes that logged it and the first
line, busiest first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: How much of a log a digest reads from its mark at most (the newest part is kept).
READ_LIMIT_BYTES = 4 << 20
SAMPLE_CHARS = 300

_EVENT = re.compile(r'^ts=\S+ level=(warning|error|critical) logger=\S+ event=("(?:[^"\\]|\\.)*"|\S+)')
_SEVERITY = {"critical": 0, "error": 1, "traceback": 1, "warning": 2}


@dataclass
class Grouped:
    """One event as the logs since the mark hold it."""

    level: str
    event: str
    count: int = 0
    processes: set[str] = field(default_factory=set)
    sample: str = ""


def mark(logs: Path) -> dict[str, int]:
    """Where each log of ``logs`` ends now (process name -> size in bytes)."""
    out: dict[str, int] = {}
    for path in sorted(logs.glob("*.log")):
        try:
            out[path.stem] = path.stat().st_size
        except OSError:
            continue  # removed meanwhile
    return out


def digest(logs: Path, since: Mapping[str, int]) -> list[Grouped]:
    """The warnings, errors and tracebacks written to ``logs`` after ``since`` (a ``mark``;
    a log that is new since then is read whole), most severe and most frequent first."""
    groups: dict[tuple[str, str], Grouped] = {}
    for path in sorted(logs.glob("*.log")):
        process = path.stem
        for line in _lines_after(path, since.get(process, 0)):
            found = _EVENT.match(line)
            if found:
                level, event = found.group(1), found.group(2).strip('"')
            elif line.startswith("Traceback (most recent call last)"):
                level, event = "traceback", "traceback"
            else:
                continue
            group = groups.setdefault((level, event), Grouped(level, event))
            group.count += 1
            group.processes.add(process)
            if not group.sample:
                group.sample = line[:SAMPLE_CHARS]
    return sorted(groups.values(), key=lambda g: (_SEVERITY[g.level], -g.count, g.event))


def render(groups: list[Grouped], limit: int = 12) -> list[str]:
    """A line per event, at most ``limit`` of them: what a reader of a failed run needs first."""
    if not groups:
        return ["the processes logged no warning, error or traceback while it ran"]
    lines = [f"{g.count} x {g.level} {g.event} ({', '.join(sorted(g.processes))}): {g.sample}"
             for g in groups[:limit]]
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} other events")
    return lines


def _lines_after(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            if offset > size:  # rewritten since the mark: read it whole
                offset = 0
            start = max(offset, size - READ_LIMIT_BYTES)
            fh.seek(start)
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if start > offset else lines  # a cut first line is not a whole event
