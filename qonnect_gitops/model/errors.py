"""The loader's error type: every problem found, each with file, line, field and reason."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with the input, at a position users can jump to (1-based)."""

    path: str
    line: int | None
    column: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class GoalsError(Exception):
    """Raised when goals (or another user file) are invalid; carries every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(
            sorted(problems, key=lambda p: (p.path, p.line or 0, p.column or 0, p.field, p.message))
        )
        super().__init__("\n".join(str(p) for p in self.problems))
