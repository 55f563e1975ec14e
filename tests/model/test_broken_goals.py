"""Every broken goals repository in the corpus is refused with the exact problems expected."""

from __future__ import annotations

import pytest

from qonnect_gitops.model import GoalsError, load_goals
from tests.model.broken_cases import apply_case, case_names, load_case


def test_corpus_is_large_enough() -> None:
    assert len(case_names()) >= 25


@pytest.mark.parametrize("name", case_names())
def test_broken_goals_report_file_line_and_reason(name: str, template_files: dict[str, bytes]) -> None:
    case = load_case(name)
    files = apply_case(case, template_files)
    with pytest.raises(GoalsError) as caught:
        load_goals(files)
    assert [str(p) for p in caught.value.problems] == case["expect"]
