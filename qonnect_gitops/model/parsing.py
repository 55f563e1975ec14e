"""Parsing with limits: the one gate every goals file and every cluster-branch file passes.

Before any YAML is built into objects, a file is checked here: its size
(``limits.MAX_FILE_BYTES``), UTF-8, and a scan of its YAML events that measures every
document as it would be once aliases are expanded (``MAX_DOCUMENT_BYTES``) and how deep
it nests (``MAX_DEPTH``). An alias bomb is refused at the alias that crosses the limit,
with ``file:line:column``, long before it costs memory. Trees are bounded by
``TreeLimits`` (``MAX_TREE_FILES`` and ``MAX_TREE_BYTES`` unless raised for goals).

The same scan builds each document's plain data as ruamel reads it (YAML 1.2), for
``yamlpos.parse_yaml``: ruamel, pure Python, is run only for positions (when a problem is
reported) and for the rare documents the scan leaves to it (anchors, tags, merge keys,
timestamps, duplicate or complex keys, ``%YAML`` directives). A file that cannot hold
an anchor, a tag or a directive and is small enough to meet no limit but nesting (most
goals files) skips the event scan: libyaml composes it in C and the same YAML 1.2 rules
build it, its depth measured as it is built. Branch files, which the agent reads by the
thousand, go to ``load_documents`` (libyaml, YAML 1.1 as PyYAML reads it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from ruamel.yaml.resolver import implicit_resolvers

from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.limits import (
    DEFAULT_TREE_LIMITS,
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_FILE_BYTES,
    MiB,
    TreeLimits,
)

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


def size_text(size: int) -> str:
    """``4194304`` -> ``4 MiB``; smaller sizes in bytes."""
    return f"{size / MiB:g} MiB" if size >= MiB else f"{size:,} bytes"


def check_tree(files: Mapping[str, bytes], what: str = "the tree", limits: TreeLimits = DEFAULT_TREE_LIMITS,
               raise_with: tuple[str, str] | None = None) -> list[Problem]:
    """Problems with a whole tree: too many files, or too many bytes together.

    ``raise_with`` names the options that raise the file and the byte limit, for the message."""
    problems = []
    if len(files) > limits.files:
        how = f"; {raise_with[0]} raises it" if raise_with else ""
        problems.append(Problem("", None, None, "", f"{what} holds more than {limits.files:,} files "
                                f"({len(files):,} read); the limit keeps validation bounded{how}"))
    total = sum(len(b) for b in files.values())
    if total > limits.bytes:
        how = f"; {raise_with[1]} raises it" if raise_with else ""
        problems.append(Problem("", None, None, "", f"{what} holds more than {size_text(limits.bytes)} "
                                f"of files ({total:,} bytes read){how}"))
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


class _Unusual(Exception):
    """A document the scan does not build: ruamel reads it (and names any error)."""


def _yaml12_resolvers() -> dict[str, list[tuple[str, Any]]]:
    """ruamel's own table of implicit tags for YAML 1.2, by first character (as its
    ``VersionedResolver`` builds it), so a plain scalar resolves exactly as ruamel resolves it."""
    table: dict[str, list[tuple[str, Any]]] = {}  # ruamel compiles its patterns lazily
    for versions, tag, regexp, first in implicit_resolvers:
        if (1, 2) in versions:
            for ch in first:
                table.setdefault(ch, []).append((tag, regexp))
    return table


_RESOLVERS = _yaml12_resolvers()


def _int12(text: str) -> int:
    """A YAML 1.2 int as ruamel's round-trip constructor reads it (underscores dropped,
    0b/0o/0x prefixes, leading zeros decimal)."""
    digits = text.replace("_", "")
    sign = -1 if digits[:1] == "-" else 1
    digits = digits[1:] if digits[:1] in ("+", "-") else digits
    base = {"0b": 2, "0o": 8, "0x": 16}.get(digits[:2], 10)
    if base != 10:
        digits = digits[2:]
    if not digits:
        raise _Unusual  # ruamel fails on these; let it say how
    return sign * int(digits, base)


def _float12(text: str) -> float:
    """A YAML 1.2 float as ruamel's round-trip constructor reads it."""
    digits = text.replace("_", "").lower()
    sign = -1.0 if digits[:1] == "-" else 1.0
    digits = digits[1:] if digits[:1] in ("+", "-") else digits
    if digits == ".nan":
        return float("nan")
    if digits == ".inf":
        return sign * float("inf")
    return sign * float(digits)


def _unusual(_: str) -> Any:
    raise _Unusual


_CONSTRUCT: dict[str, Callable[[str], Any]] = {
    "tag:yaml.org,2002:bool": lambda text: text in ("true", "True", "TRUE"),
    "tag:yaml.org,2002:null": lambda text: None,
    "tag:yaml.org,2002:int": _int12,
    "tag:yaml.org,2002:float": _float12,
}


def _plain_scalar(text: str) -> Any:
    for tag, regexp in _RESOLVERS.get(text[:1], ()):
        if regexp.match(text):
            return _CONSTRUCT.get(tag, _unusual)(text)  # merge, timestamp, value: ruamel's
    return text


@dataclass
class _Building:
    """The documents of a file as plain data, built from the scan's events."""

    docs: list[tuple[Any, int]] = field(default_factory=list)
    """(data, 1-based line where the document's node starts; 1 for a scalar document)"""
    stack: list[Any] = field(default_factory=list)
    keys: list[Any] = field(default_factory=list)
    """per open mapping: the key whose value comes next, or _KEY when a key comes next"""
    root: Any = None
    line: int = 1

    def add(self, value: Any, hashable: bool = True) -> None:
        if not self.stack:
            self.root = value
            return
        parent = self.stack[-1]
        if isinstance(parent, list):
            parent.append(value)
            return
        key = self.keys[-1]
        if key is _KEY:
            if not hashable or value in parent:
                raise _Unusual  # a complex or duplicate key: ruamel keeps or refuses it
            self.keys[-1] = value
        else:
            parent[key] = value
            self.keys[-1] = _KEY


_KEY = object()
_INTERNED = 40


def check_structure(path: str, text: str) -> None:
    """Refuse documents that expand past ``MAX_DOCUMENT_BYTES`` or nest deeper than ``MAX_DEPTH``.

    Walks libyaml's events once: every node counts one byte plus its scalar's length; an
    alias counts what its anchor counted. Nothing is built, so a bomb costs only the scan.
    Text libyaml cannot parse is left to the parser that follows (it names the error).
    """
    _scan(path, text, None)


def scan_documents(path: str, raw: bytes) -> tuple[str, list[tuple[Any, int]] | None]:
    """``checked_text`` that also builds every document as plain data, as ruamel's round-trip
    loader and ``yamlpos.to_plain`` would: ``(text, [(data, start line), ...])``, or
    ``(text, None)`` when the file holds something the scan leaves to ruamel."""
    text = decode(path, raw)
    if _SCANNERS_DIFFER.search(text, 1 if text.startswith("\ufeff") else 0):
        _scan(path, text, None)
        return text, None
    quick = _quick_documents(text)
    if quick is not None:
        return text, quick
    building = _Building()
    built = _scan(path, text, building)
    return text, (building.docs if built else None)


# Text where libyaml (YAML 1.1) and ruamel read differently or only one accepts it: tabs,
# 1.1-only line breaks, a byte-order mark past the start, a lone carriage return, a comment
# right after a block scalar's indicator, a line that starts with '%' (a directive, or text
# the two parsers split differently), a document end marker '...' (ruamel refuses one that
# ends nothing). Found by tests/model/test_scan_agrees.py's fuzzers.
_SCANNERS_DIFFER = re.compile("[\t\x85\u2028\u2029\ufeff]|\r(?!\n)|[|>][-+0-9]*#|^%|^\\.\\.\\.", re.MULTILINE)


def _scan(path: str, text: str, building: _Building | None) -> bool:
    """The limits of ``check_structure``; with ``building``, builds the documents into it as
    long as they stay usual. True when every document was built."""
    stack: list[_Open] = []
    anchors: dict[str, int] = {}
    total = 0  # this document, expanded
    done_before = 0  # the documents before it, expanded
    b = building
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if b is not None:
                try:
                    _build(b, event)
                except (_Unusual, ValueError):  # ValueError: a number ruamel fails on
                    b = None
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
        return False
    return b is not None


def _build(b: _Building, event: Any) -> None:
    """One event into ``b``; raises _Unusual for what only ruamel reads the way it does
    (anchors and aliases, explicit tags, ``%YAML``/``%TAG`` directives)."""
    kind = type(event)
    if kind is yaml.ScalarEvent:
        if event.anchor is not None or event.tag is not None:
            raise _Unusual
        if not b.stack and event.style in ("|", ">"):
            raise _Unusual  # a document that is one block scalar: ruamel ends it elsewhere
        value = _plain_scalar(event.value) if event.implicit[0] else event.value
        # Field names and short values (apiVersion, kind, v1, cpu...) repeat in every object of
        # the goals: one shared string each, not one per occurrence, in what the lead keeps.
        b.add(sys.intern(value) if type(value) is str and len(value) <= _INTERNED else value)
    elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
        if event.anchor is not None or event.tag is not None:
            raise _Unusual
        node: Any = {} if kind is yaml.MappingStartEvent else []
        if not b.stack:
            b.line = event.start_mark.line + 1
        b.add(node, hashable=False)
        b.stack.append(node)
        if kind is yaml.MappingStartEvent:
            b.keys.append(_KEY)
    elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
        if kind is yaml.MappingEndEvent:
            b.keys.pop()
        b.stack.pop()
    elif kind is yaml.DocumentStartEvent:
        if event.version is not None or event.tags:
            raise _Unusual
        b.root, b.line = None, 1
    elif kind is yaml.DocumentEndEvent:
        b.docs.append((b.root, b.line))
    elif kind is yaml.AliasEvent:
        raise _Unusual


# -- the same documents built by libyaml alone, for the files most goals are made of -------------
#
# Scanning event by event in Python is most of what a cold load of a large fleet costs. A file
# that cannot hold an alias, a tag or a directive, and that is small enough, can meet none of the
# limits but nesting: libyaml then composes it in C, a constructor with the YAML 1.2 rules of
# ``_plain_scalar`` builds it, and its depth is measured. Whatever this path does not build
# exactly as the scan would (a duplicate or complex key, a timestamp, a merge key, a block
# scalar as a document, nesting past the limit, YAML libyaml refuses) goes through the scan.

_QUICK_MAX_CHARS = MAX_DOCUMENT_BYTES // 3
"""Longer files take the scan: a document counts at most about 1.5 units per character of
text without aliases, so no shorter file can pass the size limits."""
_QUICK_MAX_NESTING_MARKS = 5_000
"""Nesting needs one of ``[{:-?`` per level: libyaml's composer (recursive, in C) is only
given files with few enough of them."""
_QUICK_REFUSED = re.compile("[&!]")  # anchors (no alias without one) and tags; directives never come here


_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"


class _QuickComposer(yaml.cyaml.CParser):  # type: ignore[misc, name-defined]
    """libyaml composing node trees, with YAML 1.2 (ruamel's) implicit tags."""

    def descend_resolver(self, parent: Any, index: Any) -> None:
        """No path resolvers: nothing to track."""

    def ascend_resolver(self) -> None:
        """No path resolvers: nothing to track."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            if implicit[0]:
                for tag, regexp in _RESOLVERS.get(value[:1], ()):
                    if regexp.match(value):
                        return str(tag)
            return _STR
        return _SEQ if kind is yaml.SequenceNode else _MAP


def _quick_documents(text: str) -> list[tuple[Any, int]] | None:
    """``scan_documents``' documents built by libyaml, or None when the scan must build them."""
    if len(text) > _QUICK_MAX_CHARS or _QUICK_REFUSED.search(text):
        return None
    marks = text.count(":") + text.count("-") + text.count("[") + text.count("{") + text.count("?")
    if marks > _QUICK_MAX_NESTING_MARKS:
        return None
    composer = _QuickComposer(text)
    docs: list[tuple[Any, int]] = []
    try:
        while composer.check_node():
            node = composer.get_node()
            if type(node) is yaml.ScalarNode:
                if node.style in ("|", ">"):
                    return None  # a document that is one block scalar: ruamel ends it elsewhere
                line = 1
            else:
                line = node.start_mark.line + 1
            docs.append((_construct(node, 1), line))
    except (_Unusual, ValueError, yaml.YAMLError, RecursionError):
        return None  # ValueError: a number ruamel fails on
    finally:
        composer.dispose()
    return docs


def _construct(node: Any, depth: int) -> Any:
    """A composed node as plain data, as ``_build`` builds it from the same events; raises
    _Unusual where the scan would (and past ``MAX_DEPTH``, which the scan then reports)."""
    kind = type(node)
    if kind is yaml.ScalarNode:
        tag = node.tag
        if tag == _STR:
            value: str = node.value
            return sys.intern(value) if len(value) <= _INTERNED else value
        construct = _CONSTRUCT.get(tag)
        if construct is None:
            raise _Unusual  # timestamps, merge keys, '=': ruamel's
        return construct(node.value)
    if depth > MAX_DEPTH:
        raise _Unusual
    if kind is yaml.SequenceNode:
        return [_construct(child, depth + 1) for child in node.value]
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        if type(key_node) is not yaml.ScalarNode:
            raise _Unusual  # a complex key: ruamel keeps or refuses it
        key = _construct(key_node, depth + 1)
        if key in mapping:
            raise _Unusual  # a duplicate key: ruamel refuses it
        mapping[key] = _construct(value_node, depth + 1)
    return mapping


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
