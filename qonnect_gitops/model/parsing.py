"""Parsing with limits: the one gate every YAML file from outside passes (goals, cluster
branches, observed and current placements, the bytes of a pull request's head).

Before any YAML is built into objects, a file is checked here: its size
(``limits.MAX_FILE_BYTES``), UTF-8, and every event of every parser that reads it passes
``Reading``, which holds the file's limits as the events come: the size of every document as
it would be once aliases are expanded (``MAX_DOCUMENT_BYTES``), the nodes of the whole file
expanded (``MAX_FILE_NODES``), how deep it nests with aliases expanded (``MAX_DEPTH``; an alias
to a collection that contains it is refused), and the CPU time its reading took
(``parse_cpu_seconds``). An alias bomb, a chain of aliases nesting ever deeper or a recursive
alias is refused at the alias, with ``file:line:column``, long before it costs memory. Trees are
bounded by ``TreeLimits`` (``MAX_TREE_FILES`` and ``MAX_TREE_BYTES`` unless raised for goals).

libyaml (C) reads first. When it cannot (invalid YAML, or text where it and ruamel read
differently), ruamel reads under the same ``Reading``: its scanner refuses flow collections
(``[``, ``{``) nested past ``MAX_DEPTH`` as it reads them (its look-ahead over deep flow
nesting is quadratic), and checks the CPU clock as it reads tokens, so no text makes either
parser run unbounded.

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
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml import events as ruamel_events
from ruamel.yaml.error import MarkedYAMLError, YAMLWarning
from ruamel.yaml.parser import RoundTripParser
from ruamel.yaml.resolver import implicit_resolvers
from ruamel.yaml.scanner import RoundTripScanner, ScannerError

from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.limits import (
    DEFAULT_TREE_LIMITS,
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_FILE_BYTES,
    MAX_FILE_NODES,
    MiB,
    TreeLimits,
    parse_cpu_seconds,
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


class _Open:
    """A mapping or sequence whose end event has not come yet: its anchor, and what it holds so
    far, expanded (size, nodes, and levels of nesting counting itself)."""

    __slots__ = ("anchor", "height", "nodes", "size")

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.size = self.nodes = self.height = 1


_DOCUMENT, _START, _END, _SCALAR, _ALIAS = range(5)
_KINDS: dict[type, int] = {
    **{kind: _DOCUMENT for kind in (yaml.DocumentStartEvent, ruamel_events.DocumentStartEvent)},
    **{kind: _START for kind in (yaml.MappingStartEvent, yaml.SequenceStartEvent,
                                 ruamel_events.MappingStartEvent, ruamel_events.SequenceStartEvent)},
    **{kind: _END for kind in (yaml.MappingEndEvent, yaml.SequenceEndEvent,
                               ruamel_events.MappingEndEvent, ruamel_events.SequenceEndEvent)},
    **{kind: _SCALAR for kind in (yaml.ScalarEvent, ruamel_events.ScalarEvent)},
    **{kind: _ALIAS for kind in (yaml.AliasEvent, ruamel_events.AliasEvent)},
}
"""The events of libyaml (PyYAML) and of ruamel that ``Reading`` counts, by what they are."""
_CLOCK_EVERY = 255  # events (or ruamel tokens) between two looks at the CPU clock, minus one


class Reading:
    """The limits of one read of one YAML file, as its parsers' events come (see the module
    docstring). One object per read: the CPU clock starts when it is made and runs across
    every pass over the file (libyaml's scan, then ruamel's when it reads the file too);
    ``restart`` begins a pass. Raises GoalsError at the event that crosses a limit."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.cpu_seconds = parse_cpu_seconds(size)
        self.deadline = time.thread_time() + self.cpu_seconds  # this thread's CPU: load is not counted
        self.ticks = 0
        self.restart()

    def restart(self) -> None:
        """Begin another pass over the file: the structure is counted again, the clock runs on."""
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[int, int, int]] = {}  # name -> (size, nodes, height) expanded
        self.open: dict[str, int] = {}  # anchors of collections not ended yet: an alias to one recurses
        self.total = 0  # this document, expanded
        self.done_before = 0  # the documents before it, expanded
        self.nodes = 0  # the whole file, expanded

    def refuse(self, mark: Any, message: str) -> GoalsError:
        """The error for a limit crossed at ``mark``: a libyaml or ruamel mark, a ruamel reader
        (its current mark), or None (no position)."""
        if hasattr(mark, "get_mark"):
            mark = mark.get_mark()
        if mark is None:
            return GoalsError([Problem(self.path, None, None, "", message)])
        return GoalsError([Problem(self.path, mark.line + 1, mark.column + 1, "", message)])

    def tick(self, mark: Any) -> None:
        """Count one step of a parser; every few, refuse when the CPU time is spent (at ``mark``,
        as ``refuse`` takes it)."""
        self.ticks += 1
        if not self.ticks & _CLOCK_EVERY and time.thread_time() > self.deadline:
            raise self.refuse(mark, f"reading this YAML took more than {self.cpu_seconds:.3g} s of CPU "
                              "(the limit for a file of this size); split it, or write it more plainly")

    def see(self, event: Any) -> None:
        """Count one event; raises GoalsError when it crosses a limit."""
        kind = _KINDS.get(type(event))
        if kind is None:
            return  # stream and document ends
        self.tick(event.start_mark)
        stack = self.stack
        if kind == _DOCUMENT:
            self.stack, self.anchors, self.open = [], {}, {}
            self.done_before, self.total = self.done_before + self.total, 0
            return
        if kind == _START:
            if len(stack) >= MAX_DEPTH:
                raise self.refuse(event.start_mark, f"nests deeper than {MAX_DEPTH} levels")
            anchor = event.anchor
            stack.append(_Open(anchor))
            if anchor is not None:
                self.open[anchor] = self.open.get(anchor, 0) + 1
            size = nodes = 1
        elif kind == _END:
            done = stack.pop()
            if done.anchor is not None:
                self.anchors[done.anchor] = (done.size, done.nodes, done.height)
                left = self.open[done.anchor] - 1
                if left:
                    self.open[done.anchor] = left
                else:
                    del self.open[done.anchor]
            if stack:
                parent = stack[-1]
                parent.size += done.size
                parent.nodes += done.nodes
                if done.height >= parent.height:
                    parent.height = done.height + 1
            return
        elif kind == _SCALAR:
            size, nodes = 1 + len(event.value), 1
            if event.anchor is not None:
                self.anchors[event.anchor] = (size, 1, 0)
        else:
            name = event.anchor or ""
            if name in self.open:
                raise self.refuse(event.start_mark, f"the alias *{name} refers to a collection that contains "
                                  "it; a recursive structure cannot be written out")
            size, nodes, height = self.anchors.get(name, (1, 1, 0))  # undefined: the parser says so
            if len(stack) + height > MAX_DEPTH:
                raise self.refuse(event.start_mark, f"the alias *{name} nests this document deeper than "
                                  f"{MAX_DEPTH} levels; write the content out or nest it less")
            if self.total + size > MAX_DOCUMENT_BYTES or self.done_before + self.total + size > MAX_FILE_BYTES:
                whole = "document" if self.total + size > MAX_DOCUMENT_BYTES else "file"
                limit = MAX_DOCUMENT_BYTES if whole == "document" else MAX_FILE_BYTES
                raise self.refuse(event.start_mark, f"the alias *{name} expands this {whole} past "
                                  f"{size_text(limit)}; write the content out or use fewer aliases")
            if self.nodes + nodes > MAX_FILE_NODES:
                raise self.refuse(event.start_mark, f"the alias *{name} expands this file past "
                                  f"{MAX_FILE_NODES:,} nodes; write the content out or use fewer aliases")
            if stack and height >= stack[-1].height:
                stack[-1].height = height + 1
        self.total += size
        self.nodes += nodes
        if stack and kind != _START:
            stack[-1].size += size
            stack[-1].nodes += nodes
        if self.total > MAX_DOCUMENT_BYTES:
            raise self.refuse(event.start_mark, f"this YAML document is larger than {size_text(MAX_DOCUMENT_BYTES)}; "
                              "Kubernetes stores at most about 1.5 MiB per object")
        if self.done_before + self.total > MAX_FILE_BYTES:
            raise self.refuse(event.start_mark, f"the documents of this file expand past {size_text(MAX_FILE_BYTES)}")
        if self.nodes > MAX_FILE_NODES:
            raise self.refuse(event.start_mark, f"this file holds more than {MAX_FILE_NODES:,} YAML nodes; split it")


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


def check_structure(path: str, text: str, reading: Reading | None = None) -> None:
    """Refuse documents over the limits of ``Reading`` (size and nodes expanded, depth, CPU).

    Walks libyaml's events once: nothing is built, so a bomb costs only the scan. Text
    libyaml cannot parse is left to the parser that follows: it names the error, and reads
    under the same limits (libyaml itself, or ruamel through ``ruamel_nodes``).
    """
    _scan(path, text, None, reading)


def scan_documents(path: str, raw: bytes, reading: Reading | None = None) -> tuple[str, list[tuple[Any, int]] | None]:
    """``decode`` and the limits, and every document built as plain data, as ruamel's round-trip
    loader and ``yamlpos.to_plain`` would: ``(text, [(data, start line), ...])``, or
    ``(text, None)`` when the file holds something the scan leaves to ruamel (which then reads
    it through ``ruamel_nodes`` with ``reading``, under the same limits)."""
    text = decode(path, raw)
    if _SCANNERS_DIFFER.search(text, 1 if text.startswith("\ufeff") else 0):
        return text, None  # libyaml would count what ruamel does not read: ruamel's own events are counted
    quick = _quick_documents(text)
    if quick is not None:
        return text, quick
    building = _Building()
    built = _scan(path, text, building, reading)
    return text, (building.docs if built else None)


# Text where libyaml (YAML 1.1) and ruamel read differently or only one accepts it: tabs,
# 1.1-only line breaks, a byte-order mark past the start, a lone carriage return, a comment
# right after a block scalar's indicator, a line that starts with '%' (a directive, or text
# the two parsers split differently), a document end marker '...' (ruamel refuses one that
# ends nothing). Found by tests/model/test_scan_agrees.py's fuzzers.
_SCANNERS_DIFFER = re.compile("[\t\x85\u2028\u2029\ufeff]|\r(?!\n)|[|>][-+0-9]*#|^%|^\\.\\.\\.", re.MULTILINE)


def _scan(path: str, text: str, building: _Building | None, reading: Reading | None = None) -> bool:
    """libyaml's events through ``reading`` (a new one when None); with ``building``, builds the
    documents into it as long as they stay usual. True when every document was built; False
    too when libyaml cannot read the text (the parser that follows names the error)."""
    see = (reading or Reading(path, len(text))).see
    b = building
    try:
        for event in yaml.parse(text, Loader=_Loader):
            see(event)
            if b is not None:
                try:
                    _build(b, event)
                except (_Unusual, ValueError):  # ValueError: a number ruamel fails on
                    b = None
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


def checked_text(path: str, raw: bytes, reading: Reading | None = None) -> str:
    """``decode`` then ``check_structure``: the text of a file that is safe to parse."""
    text = decode(path, raw)
    check_structure(path, text, reading or Reading(path, len(raw)))
    return text


def load_documents(path: str, raw: bytes) -> list[Any]:
    """Every document of a YAML file as plain data (empty documents dropped), within limits.

    For cluster-branch files. Raises GoalsError with the file, line and reason.
    """
    text = checked_text(path, raw)
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        raise _invalid(path, exc) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise GoalsError([Problem(path, None, None, "", f"invalid YAML: {exc}")]) from None


# -- ruamel, under the same limits -------------------------------------------------------------


class _Scanner(RoundTripScanner):
    """ruamel's scanner, refusing flow nesting past ``MAX_DEPTH`` as it reads it, watching the
    CPU clock per token, and finding its possible simple keys in constant time.

    Each open flow level may hold a possible simple key (``[`` and ``{`` may start one), and
    ruamel looks through all of them several times per token: over ``[[[[...`` it spent 0.5 s
    before its first event, and 8 ms per line of 99 nested brackets (40 s per MiB). Keys are
    saved as the reader moves forward, so the dict holding them is in the order of their
    positions, and the stale ones (on an earlier line, or over 1,024 characters back) are
    always its first entries: the two methods below stop at the first key that is not."""

    def next_possible_simple_key(self) -> Any:
        for key in self.possible_simple_keys.values():
            return key.token_number  # the first saved is the nearest
        return None

    def stale_possible_simple_keys(self) -> None:
        keys = self.possible_simple_keys
        while keys:
            level, key = next(iter(keys.items()))
            if key.line == self.reader.line and self.reader.index - key.index <= 1024:
                return
            if key.required:
                raise ScannerError("while scanning a simple key", key.mark, "could not find expected ':'",
                                   self.reader.get_mark())
            del keys[level]

    def fetch_more_tokens(self) -> Any:
        self.loader.reading.tick(self.reader)
        return super().fetch_more_tokens()

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise self.loader.reading.refuse(self.reader.get_mark(), f"nests deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(TokenClass, to_push)


class _Parser(RoundTripParser):
    """ruamel's parser, every event it hands the composer counted by the file's ``Reading``."""

    def get_event(self) -> Any:
        event = super().get_event()
        self.loader.reading.see(event)
        return event


# ruamel warns about what YAML 1.2 allows (a reused anchor: the later one counts), once per
# occurrence with its position in the message: every one would print, and stay in the warnings
# registry of the process for good (50,000 entries for one file of 50,000 reused anchors).
warnings.filterwarnings("ignore", category=YAMLWarning)


def ruamel_nodes(path: str, text: str, reading: Reading) -> list[Any]:
    """Every document of ``text`` as ruamel's round-trip nodes (YAML 1.2, duplicate keys
    refused), read under ``reading``'s limits. Raises GoalsError naming the file, line and
    what the parser found."""
    reader = YAML(typ="rt")
    reader.allow_duplicate_keys = False
    reader.Scanner, reader.Parser = _Scanner, _Parser
    reader.reading = reading  # type: ignore[attr-defined]  # what _Scanner and _Parser read
    reading.restart()
    try:
        return list(reader.load_all(text))
    except GoalsError:
        raise
    except MarkedYAMLError as exc:
        raise _invalid(path, exc) from None
    except Exception as exc:  # ruamel raises a zoo of types on odd input; all mean "bad YAML"
        raise GoalsError([Problem(path, None, None, "", f"invalid YAML: {exc}")]) from None


def _invalid(path: str, exc: yaml.MarkedYAMLError | MarkedYAMLError) -> GoalsError:
    """A parser's error (libyaml's or ruamel's: the same fields) at its position."""
    mark = exc.problem_mark or exc.context_mark
    what = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
    line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
    return GoalsError([Problem(path, line, col, "", f"invalid YAML: {what}")])
