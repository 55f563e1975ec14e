"""No input leaves its code span (issue 30, defect 10): the preview comment and the tables of
decisions put everything that comes from goals (problems, keys, names, reasons) in code spans
that a backtick, a pipe, a newline, a link, an @mention or HTML cannot close. Rendered with
markdown-it (CommonMark with GFM tables), hostile text shows up only as code."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from qonnect_gitops.forge.preview import MARKER, Change, Preview, preview, preview_markdown
from qonnect_gitops.model import CurrentPlacement
from qonnect_gitops.model.observed import empty_observation
from qonnect_gitops.render.describe import md_code

HOSTILE = [
    "x` [click](https://evil.example) @admin `y",
    "```\n# heading\n```",
    "<img src=x onerror=alert(1)> <script>x</script>",
    "| cell | break | @team",
    "``` `` ` ``````",
    "`",
    "a\\|b `c` \\",
    "line\r\nnext\u2028third\x85fourth",
    " padded `",
    "https://evil.example/@user",
    "",
]
LIVE = ("link_open", "image", "html_inline", "html_block", "heading_open", "fence", "code_block")
OURS = {MARKER, "<details><summary>Placement at the head</summary>", "</details>"}
"""The HTML the comment itself holds: the marker that finds it, the collapsed placement."""


def _render(text: str) -> list[Any]:
    return MarkdownIt("commonmark").enable("table").parse(text)


def _outside_code(tokens: list[Any]) -> str:
    """Every piece of text that renders as text, not code."""
    out = []
    for token in tokens:
        if token.type == "inline":
            out += [child.content for child in token.children or () if child.type == "text"]
    return "".join(out)


def _live(tokens: list[Any]) -> list[str]:
    """What renders as more than text and code, but for the comment's own HTML and headings."""
    found = [t.type for t in tokens if t.type in LIVE and t.content.strip() not in OURS
             and not (t.type == "heading_open" and t.markup in ("###", "####"))]
    for token in tokens:
        found += [c.type for c in token.children or () if c.type in LIVE]
    return found


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sampled_from(HOSTILE), st.text(alphabet="`|@[]()<>:/\\ \n*_#!xy", max_size=30)),
       st.booleans())
def test_a_code_span_holds_any_text(text: str, cell: bool) -> None:
    span = md_code(text, cell=cell)
    line = f"| {span} |\n|---|\n| {span} |" if cell else f"- {span} and @{{marker}}"
    tokens = _render(line)
    codes = [c.content for t in tokens if t.type == "inline" for c in t.children or () if c.type == "code_inline"]
    expected = " ".join(text.splitlines()).replace("|", "\u2223") if cell else " ".join(text.splitlines())
    assert codes == ([expected] * 2 if cell else [expected]) or (not text.strip() and len(codes) == (2 if cell else 1))
    assert _live(tokens) == []


@pytest.mark.parametrize("text", HOSTILE)
def test_problems_unmet_goals_and_changes_of_a_preview_render_only_as_code(text: str) -> None:
    p = Preview(valid=False, errors=(f"apps/x.yaml:1:1: spec.{text}: unknown field '{text}'",) * 2)
    assert _outside_code(_render(preview_markdown(p, "a" * 40, "b" * 40))).count("@") == 0
    assert _live(_render(preview_markdown(p))) == []
    valid = Preview(valid=True, changes=(Change(text, {text: 1}, {"edge-1": 2}),),
                    unmet=({"component": text, "goal": text, "reason": text},))
    rendered = _render(preview_markdown(valid))
    assert _live(rendered) == [] and "@" not in _outside_code(rendered) and "evil" not in _outside_code(rendered)
    stopped = Preview(valid=False, stopped=text)
    assert _live(_render(preview_markdown(stopped))) == []


def test_a_backtick_in_a_yaml_key_stays_in_the_comment_s_code_span(template_files: dict[str, bytes]) -> None:
    # The case: a real preview of a head whose key holds a backtick, a link and a mention.
    head = dict(template_files)
    head["qonnect.yaml"] = head["qonnect.yaml"].replace(
        b"spec:\n", b"spec:\n  'x` [click](https://evil.example/@admin) @admin `y': 1\n", 1)
    result = preview(template_files, head, CurrentPlacement(), lambda goals: empty_observation(datetime.now(UTC)))
    assert not result.valid and any("@admin" in e for e in result.errors)
    tokens = _render(preview_markdown(result))
    assert _live(tokens) == [] and "@admin" not in _outside_code(tokens) and "evil" not in _outside_code(tokens)


def test_the_head_plan_keeps_reasons_in_code(template_files: dict[str, bytes]) -> None:
    # The placement table (also the body of proposals' pull requests and decision commits).
    result = preview(template_files, template_files, CurrentPlacement(), lambda goals: empty_observation(
        datetime.now(UTC)))
    assert result.head_plan is not None
    plan = result.head_plan
    key = next(iter(plan.components))
    component = plan.components[key]
    hostile = component.assignments[0].model_copy(update={"reason": HOSTILE[0] + " | " + HOSTILE[2]})
    plan = plan.model_copy(update={"components": {**plan.components, key: component.model_copy(
        update={"assignments": (hostile, *component.assignments[1:])})}})
    tokens = _render(preview_markdown(Preview(valid=True, head_plan=plan)))
    assert _live(tokens) == [] and "@admin" not in _outside_code(tokens)
    plain = _render(preview_markdown(Preview(valid=True, head_plan=result.head_plan)))
    rows = [[t.type for t in rendered if t.type in ("tr_open", "td_open")] for rendered in (tokens, plain)]
    assert rows[0] == rows[1]  # the pipe in the reason split no cell
