"""YAML with positions: parse user files with ruamel.yaml and report pydantic validation
errors as ``file:line:column: field: message`` problems.

This is the one place that knows how to map a validation error back to where the user
wrote the value; every loader of user files (goals, observed snapshots, plans) uses it.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, TypeVar, Union

from pydantic import BaseModel, ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar

from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.parsing import Reading, decode, ruamel_nodes, scan_documents

M = TypeVar("M", bound=BaseModel)
Loc = Sequence[int | str]


@dataclass(frozen=True)
class YamlDocument:
    """One parsed YAML document: plain data for validation, the node tree for positions."""

    path: str
    data: Any
    node: Any
    start_line: int  # 1-based line where the document starts

    def position(self, loc: Loc, key: bool = False) -> tuple[int, int]:
        """1-based (line, column) of the value at ``loc``, or of its key when ``key`` is set.

        Walks as deep as the document goes; a path that leaves the document (a missing
        field) points at the deepest mapping or sequence that exists.
        """
        node = self.node.load() if isinstance(self.node, _Reparse) else self.node
        line, col = self.start_line - 1, 0
        if isinstance(node, (CommentedMap, CommentedSeq)):
            line, col = node.lc.line, node.lc.col
        for i, part in enumerate(loc):
            last = i == len(loc) - 1
            if isinstance(node, CommentedMap) and part in node:
                line, col = node.lc.key(part) if (key and last) else node.lc.value(part)
                node = node[part]
            elif (
                isinstance(node, CommentedSeq)
                and isinstance(part, int)
                and 0 <= part < len(node)
            ):
                line, col = node.lc.item(part)
                node = node[part]
            else:
                break
        return line + 1, col + 1

    def problem(self, loc: Loc, message: str, key: bool = False) -> Problem:
        """A problem about the value at ``loc`` in this document."""
        line, col = self.position(loc, key=key)
        return Problem(self.path, line, col, format_loc(loc), message)


class _Reparse:
    """Stands for the node tree of document ``index`` of ``raw``: parsed again when a
    position is asked for. A node tree costs several times the plain data, and positions
    are needed only to report a problem."""

    __slots__ = ("index", "path", "raw")

    def __init__(self, path: str, raw: bytes, index: int) -> None:
        self.path, self.raw, self.index = path, raw, index

    def load(self) -> Any:
        """The node tree, or None when ruamel cannot read the file within its limits."""
        nodes = _nodes(self.path, self.raw)
        return nodes[self.index] if nodes is not None and self.index < len(nodes) else None


@functools.lru_cache(maxsize=16)
def _nodes(path: str, raw: bytes) -> list[Any] | None:
    # None (cached too: a file with many problems is not read again for each) when the reading
    # runs out of CPU where the first one did not: libyaml read it first, ruamel is slower.
    # Positions then fall back to where each document starts.
    try:
        return ruamel_nodes(path, decode(path, raw), Reading(path, len(raw)))
    except GoalsError:
        return None


def detached(doc: YamlDocument, raw: bytes, index: int) -> YamlDocument:
    """``doc`` (document ``index`` of the file ``raw``) without its node tree, for keeping
    many documents: positions re-parse the bytes on demand, so they come out the same."""
    return YamlDocument(doc.path, doc.data, _Reparse(doc.path, raw, index), doc.start_line)


def format_loc(loc: Loc) -> str:
    """``('spec', 'nodes', 0, 'cpu')`` -> ``spec.nodes[0].cpu``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_yaml(path: str, raw: bytes, multi: bool = False) -> list[YamlDocument]:
    """Parse ``raw`` as YAML (all documents when ``multi``; else exactly one).

    The file is read within the limits of ``model.parsing`` (size, nodes and depth with
    aliases expanded, recursive aliases, CPU time), whichever parser reads it.
    Raises GoalsError naming the file, line and what the parser found.

    The data comes from the limits' libyaml scan when it could build it (the usual
    case); the documents' positions then re-parse the file with ruamel when asked for.
    Files the scan leaves to ruamel, and every file with a problem, are parsed here with
    ruamel, so errors read as they always did.
    """
    reading = Reading(path, len(raw))
    text, built = scan_documents(path, raw, reading)
    if built is not None and (multi or (len(built) == 1 and built[0][0] is not None)):
        return [YamlDocument(path, data, _Reparse(path, raw, i), line) for i, (data, line) in enumerate(built)]
    docs = []
    for node in ruamel_nodes(path, text, reading):
        line = node.lc.line + 1 if isinstance(node, (CommentedMap, CommentedSeq)) else 1
        docs.append(YamlDocument(path, to_plain(node), node, line))
    if not multi:
        if len(docs) > 1:
            second = docs[1].start_line
            raise GoalsError(
                [Problem(path, second, 1, "", "holds more than one YAML document; expected one")]
            )
        if not docs or docs[0].data is None:
            raise GoalsError([Problem(path, 1, 1, "", "is empty; expected a YAML mapping")])
    return docs


def to_plain(node: Any) -> Any:
    """ruamel's round-trip nodes as plain dicts, lists, str, int, float, bool and None.

    The nodes come from ``parsing.ruamel_nodes``, whose limits refused recursive aliases and
    bound the size and depth of what expanding the others builds."""
    if isinstance(node, dict):
        return {_plain_key(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, TaggedScalar):
        return str(node.value)
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, (datetime, date)):
        return node
    return str(node)


def _plain_key(key: Any) -> Any:
    plain = to_plain(key)
    # Non-scalar keys (``? [a, b]``) become tuples in ruamel; keep them hashable.
    return tuple(plain) if isinstance(plain, list) else plain if not isinstance(plain, dict) else str(plain)


def validate_document(model: type[M], doc: YamlDocument) -> M:
    """Validate one document against a model; raises GoalsError with every problem located."""
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise GoalsError(problems_from_validation(model, doc, exc)) from None


def problems_from_validation(
    model: type[BaseModel], doc: YamlDocument, exc: ValidationError
) -> list[Problem]:
    """Each pydantic error as a located problem with a message that says what is expected."""
    problems = []
    errors = exc.errors()
    for error in errors:
        loc = tuple(error["loc"])
        kind = error["type"]
        if kind == "too_short" and any(
            len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc
            for other in errors
        ):
            continue  # an item failed, so the list came out short: the item's error says it
        if kind == "too_short":
            problems.append(doc.problem(loc, f"expected at least {error['ctx']['min_length']} "
                                        f"item(s), got {error['ctx']['actual_length']}"))
            continue
        if kind == "extra_forbidden":
            allowed = _field_names_at(model, loc[:-1])
            message = f"unknown field '{loc[-1]}'"
            if allowed:
                message += f"; expected one of: {', '.join(allowed)}"
            problems.append(doc.problem(loc, message, key=True))
            continue
        if kind == "missing":
            message = "required field is missing"
        elif kind in ("value_error", "assertion_error"):
            message = str(error["ctx"]["error"]) if "ctx" in error else error["msg"]
        else:
            message = _describe(error["msg"], error.get("input"))
        problems.append(doc.problem(loc, message))
    return problems


def _describe(msg: str, value: Any) -> str:
    prefix = "Input should be "
    if msg.startswith(prefix):
        return f"got {show_value(value)}; expected {msg[len(prefix):]}"
    return f"{msg} (got {show_value(value)})"


def show_value(value: Any) -> str:
    """A short description of a value for messages: its kind for collections, else its repr."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field_names_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names (as users write them) of the model found by following ``loc``."""
    annotation: Any = model
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    target = _unwrap_model(annotation)
    if target is None:
        return []
    return [field.alias or name for name, field in target.model_fields.items()]


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in _alternatives(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _alternatives(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _alternatives(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [alt for arg in typing.get_args(annotation) for alt in _alternatives(arg)]
    return [annotation]


def _step(annotation: Any, part: int | str) -> Any:
    for candidate in _alternatives(annotation):
        origin = typing.get_origin(candidate)
        args = typing.get_args(candidate)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel) and isinstance(part, str):
            for name, field in candidate.model_fields.items():
                if part in (name, field.alias):
                    return field.annotation
        elif origin in (tuple, list) and isinstance(part, int) and args:
            return args[0]
        elif origin is dict and args:
            return args[1]
    return None
