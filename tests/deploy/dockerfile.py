"""Read a Dockerfile into its stages and instructions, as the builder does: backslash
continuations joined, comment lines (also inside a continuation) dropped, keywords in any
case. Enough to check what the image holds without a Docker engine (none runs here)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form ENTRYPOINT/CMD, or None (shell form)."""
        try:
            value = json.loads(self.args)
        except ValueError:
            return None
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        """The ENV of this stage (``KEY=VALUE`` pairs; quotes removed)."""
        out: dict[str, str] = {}
        for inst in self.all("ENV"):
            for word in shlex.split(inst.args):
                key, sep, value = word.partition("=")
                if not sep:
                    raise ValueError(f"line {inst.line}: ENV in the legacy `KEY value` form")
                out[key] = value
        return out

    def run_commands(self) -> list[list[str]]:
        """Every simple command of the stage's shell-form RUNs, split at && ; and |."""
        commands: list[list[str]] = []
        for inst in self.all("RUN"):
            words: list[str] = []
            for word in shlex.split(inst.args):
                if word in ("&&", ";", "||", "|"):
                    commands.append(words)
                    words = []
                else:
                    words.append(word)
            commands.append(words)
        return [c for c in commands if c]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if not current:
            start = number
        if stripped.endswith("\\"):
            current.append(stripped[:-1])
            continue
        current.append(stripped)
        lines.append((start, " ".join(p.strip() for p in current if p.strip())))
        current = []
    if current:
        lines.append((start, " ".join(current)))
    return lines


def parse(path: Path) -> list[Stage]:
    """The stages of the Dockerfile at ``path``, in order."""
    stages: list[Stage] = []
    for number, line in _logical_lines(path.read_text()):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            if match is None:
                raise ValueError(f"line {number}: FROM {args!r}")
            stages.append(Stage(match[1], match[2]))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"line {number}: {keyword} before the first FROM")
        else:
            stages[-1].instructions.append(Instruction(keyword, args.strip(), number))
    return stages
