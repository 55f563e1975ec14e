"""Why a replicated write was not committed: ``ProposalError`` and pysyncobj's reasons."""

from __future__ import annotations

from pysyncobj import FAIL_REASON

_FAIL_NAMES: dict[int, str] = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}


class ProposalError(Exception):
    """A replicated write was not committed (no leader, leader changed, timeout...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def fail_name(code: int) -> str:
    """pysyncobj's FAIL_REASON number as a readable name."""
    return _FAIL_NAMES.get(code, f"code-{code}").lower().replace("_", "-")


def succeeded(code: int) -> bool:
    """Whether pysyncobj's answer ``code`` says the command was applied."""
    return bool(code == FAIL_REASON.SUCCESS)
