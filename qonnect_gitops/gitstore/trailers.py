"""Commit messages: a one-line summary, a readable body and ``Key: value`` trailers.

Git treats the last paragraph of a message as its trailer block when every line
in it is ``Token: value``; we always write the trailers as their own final
paragraph so ``git log --format=%(trailers)`` and ``git interpret-trailers``
read them back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

Reason = Literal["initial", "goals-changed", "failover", "rescheduling", "scaling"]
REASONS: tuple[str, ...] = get_args(Reason)

SOURCE = "Qonnect-Source"
TERM = "Qonnect-Term"
GENERATION = "Qonnect-Generation"
REASON = "Qonnect-Reason"
PLAN = "Qonnect-Plan"
ALLOW_EMPTY = "Qonnect-Allow-Empty"
PRUNE_LIMIT = "Qonnect-Prune-Limit"
EMPTY_CLUSTER = "Qonnect-Empty-Cluster"
PROPOSAL = "Qonnect-Proposal"
SUPERSEDES = "Qonnect-Supersedes"

_TRAILER_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*): ?(.*)$")


@dataclass(frozen=True)
class DecisionMeta:
    """Why a decision was made: the trailers every plan and cluster commit carries.

    ``source`` is the goals commit id the decision was computed from, ``term`` the Raft
    term of the leader (0 outside Raft), ``generation`` a number that strictly increases
    from one plan commit to the next, ``reason`` one of ``REASONS``.
    """

    source: str
    term: int
    generation: int
    reason: Reason

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"reason must be one of {', '.join(REASONS)}, not {self.reason!r}")
        if self.term < 0 or self.generation < 0:
            raise ValueError("term and generation must be non-negative")
        _check_value(self.source)

    def trailers(self) -> list[tuple[str, str]]:
        """The four decision trailers in their canonical order."""
        return [
            (SOURCE, self.source),
            (TERM, str(self.term)),
            (GENERATION, str(self.generation)),
            (REASON, self.reason),
        ]

    @classmethod
    def from_trailers(cls, trailers: Sequence[tuple[str, str]]) -> DecisionMeta:
        """Read the decision trailers back from a parsed message; raises ``ValueError`` if absent."""
        found = {k: v for k, v in trailers}
        try:
            return cls(
                source=found[SOURCE],
                term=int(found[TERM]),
                generation=int(found[GENERATION]),
                reason=found[REASON],  # type: ignore[arg-type]
            )
        except KeyError as missing:
            raise ValueError(f"commit message lacks the {missing.args[0]} trailer") from None


def _check_value(value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"trailer values must be one line: {value!r}")


def format_message(summary: str, body: str, trailers: Iterable[tuple[str, str]]) -> str:
    """Build a commit message; the summary must be one non-empty line."""
    summary = summary.strip()
    if not summary or "\n" in summary:
        raise ValueError("the summary must be one non-empty line")
    parts = [summary]
    if body.strip():
        parts.append(body.strip("\n"))
    lines = []
    for key, value in trailers:
        if not _TRAILER_LINE.match(f"{key}: x"):
            raise ValueError(f"bad trailer key {key!r}")
        _check_value(value)
        lines.append(f"{key}: {value}")
    if lines:
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def parse_trailers(message: str) -> list[tuple[str, str]]:
    """The trailers of a message: its last paragraph, when every line is ``Key: value``."""
    paragraphs = [p for p in re.split(r"\n\s*\n", message.strip()) if p.strip()]
    if len(paragraphs) < 2:
        return []
    out: list[tuple[str, str]] = []
    for line in paragraphs[-1].splitlines():
        match = _TRAILER_LINE.match(line)
        if not match:
            return []
        out.append((match.group(1), match.group(2).strip()))
    return out


def trailer_values(trailers: Sequence[tuple[str, str]], key: str) -> list[str]:
    """Every value of ``key`` in order (trailers may repeat)."""
    return [v for k, v in trailers if k == key]


def message_body(message: str) -> str:
    """The message without its summary line and trailer block."""
    paragraphs = [p for p in re.split(r"\n\s*\n", message.strip()) if p.strip()]
    if parse_trailers(message):
        paragraphs = paragraphs[:-1]
    return "\n\n".join(paragraphs[1:])
