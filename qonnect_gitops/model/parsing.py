"""Parsing with limits: the one gate every goals file and every cluster-branch file passes.

Before any YAML is built into objects, a file is checked here: its size
(``limits.MAX_FILE_BYTES``), UTF-8, and a scan of its YAML events that measures every
document as it would be once aliases are expanded (``MAX_DOCUMENT_BYTES``) and how deep
it nests (``MAX_DEPTH``). An alias bomb is refused at the alias that crosses the limit,
with ``file:line:column``, long before it costs memory. Trees are bounded by
``MAX_TREE_FILES`` and ``MAX_TREE_BYTES``.

Goals go on to ``yamlpos.parse_yaml`` (ruamel, positions for messages); branch files,
which the agent reads by the thousand, to ``load_documents`` (libyaml, fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.limits import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_FILE_BYTES,
    MAX_TREE_BYTES,
    MAX_TREE_FILES,
    MiB,
)

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


def size_text(size: int) -> str:
    """``4194304`` -> ``4 MiB``; smaller sizes in bytes."""
    return f"{size / MiB:g} MiB" if size >= MiB else f"{size:,} bytes"


def check_tree(files: Mapping[str, bytes], what: str = "the tree") -> list[Problem]:
    """Problems with a whole tree: too many files, or too many bytes together."""
    problems = []
    if len(files) > MAX_TREE_FILES:
        problems.append(Problem("", None, None, "", f"{what} holds more than {MAX_TREE_FILES:,} files "
                                f"({len(files):,} read); the limit keeps validation bounded"))
    total = sum(len(b) for b in files.values())
    if total > MAX_TREE_BYTES:
        problems.append(Problem("", None, None, "", f"{what} holds more than {size_text(MAX_TREE_BYTES)} "
                                f"of files ({total:,} bytes read)"))
    return problems


def decode(path: str, raw: bytes) -> str:
    """The file as text, after the size check; raises GoalsError."""
    if len(raw) > MAX_FILE_BYTES:
        raise GoalsError([Problem(path, None, None, "", f"is larger than {size_text(MAX_FILE_BYTES)} "
                                  f"(at least {len(raw):,} bytes); split it, or keep large data "
                                  "out of the repository")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GoalsError([Problem(path, None, None, "", f"not UTF-8 text ({exc.reason})")]) from None


@dataclass
class _Open:
    """A mapping or sequence whose end event has not come yet."""

    anchor: str | None
    size: int = 1


def check_structure(path: str, text: str) -> None:
    """Refuse documents that expand past ``MAX_DOCUMENT_BYTES`` or nest deeper than ``MAX_DEPTH``.

    Walks libyaml's events once: every node counts one byte plus its scalar's length; an
    alias counts what its anchor counted. Nothing is built, so a bomb costs only the scan.
    Text libyaml cannot parse is left to the parser that follows (it names the error).
    """
    stack: list[_Open] = []
    anchors: dict[str, int] = {}
    total = 0  # this document, expanded
    done_before = 0  # the documents before it, expanded
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.DocumentStartEvent):
                stack, anchors, done_before, total = [], {}, done_before + total, 0
                continue
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(stack) >= MAX_DEPTH:
                    raise _problem(path, event, f"nests deeper than {MAX_DEPTH} levels")
                stack.append(_Open(event.anchor))
                size = 1
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                done = stack.pop()
                if done.anchor is not None:
                    anchors[done.anchor] = done.size
                if stack:
                    stack[-1].size += done.size
                continue
            elif isinstance(event, yaml.ScalarEvent):
                size = 1 + len(event.value)
                if event.anchor is not None:
                    anchors[event.anchor] = size
            elif isinstance(event, yaml.AliasEvent):
                size = anchors.get(event.anchor or "", 1)
                if total + size > MAX_DOCUMENT_BYTES or done_before + total + size > MAX_FILE_BYTES:
                    whole = "document" if total + size > MAX_DOCUMENT_BYTES else "file"
                    limit = MAX_DOCUMENT_BYTES if whole == "document" else MAX_FILE_BYTES
                    raise _problem(path, event, f"the alias *{event.anchor} expands this {whole} past "
                                   f"{size_text(limit)}; write the content out or use fewer aliases")
            else:
                continue
            total += size
            if stack and not isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack[-1].size += size
            if total > MAX_DOCUMENT_BYTES:
                raise _problem(path, event, f"this YAML document is larger than {size_text(MAX_DOCUMENT_BYTES)}; "
                               "Kubernetes stores at most about 1.5 MiB per object")
            if done_before + total > MAX_FILE_BYTES:
                raise _problem(path, event, f"the documents of this file expand past {size_text(MAX_FILE_BYTES)}")
    except yaml.YAMLError:
        return


def _problem(path: str, event: Any, message: str) -> GoalsError:
    mark = event.start_mark
    return GoalsError([Problem(path, mark.line + 1, mark.column + 1, "", message)])


def checked_text(path: str, raw: bytes) -> str:
    """``decode`` then ``check_structure``: the text of a file that is safe to parse."""
    text = decode(path, raw)
    check_structure(path, text)
    return text


def load_documents(path: str, raw: bytes) -> list[Any]:
    """Every document of a YAML file as plain data (empty documents dropped), within limits.

    For cluster-branch files. Raises GoalsError with the file, line and reason.
    """
    text = checked_text(path, raw)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise GoalsError([Problem(path, line, col, "", f"invalid YAML: {what}")]) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise GoalsError([Problem(path, None, None, "", f"invalid YAML: {exc}")]) from None
