"""How pysyncobj pickles and unpickles in a lead: messages, log entries and full dumps
are pickled at ``RAFT_PICKLE_PROTOCOL``, and everything it unpickles goes through
``restricted_loads``, which builds only the data types the replicated log carries
(``replicated_class``: the records and enums of the model and the KB, pysyncobj's
nodes). A frame sealed with the group's secret that names any other global is refused
like a forged one: a holder of the secret can change the Knowledge Base, not run code in
a lead (docs/operations-leads.md, threat model)."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import io
import pickle
from typing import Any, BinaryIO

import msgspec
import pydantic
import pysyncobj.journal as pysyncobj_journal  # type: ignore[import-untyped]
import pysyncobj.pickle as pysyncobj_pickle  # type: ignore[import-untyped]
from pysyncobj.node import Node, TCPNode  # type: ignore[import-untyped]

# The pickle protocol of pysyncobj's messages between leads, of the commands its log
# holds and of its full dumps (it hard-codes 2). Protocol 2 writes ``bytes`` as latin-1
# text, two bytes for each byte over 0x7f, and a report batch (MessagePack) travels as
# bytes pickled twice (the command, then the message carrying it): a 32 KB batch became
# a 55 KB message, and pickling it cost 20 times protocol 4's CPU. The unpickler reads
# any protocol, so journals and dumps written at 2 still load.
RAFT_PICKLE_PROTOCOL = 4


# Where the classes the replicated log and the full dumps carry live, besides plain data
# (dicts, lists, tuples, sets, strings, bytes, numbers): the records of the Knowledge
# Base's commands and the enums inside them. Both packages hold data types only (the pure
# model, and the KB, which does no I/O), so building one of their records runs no code
# that touches anything outside the object.
DATA_PACKAGES = ("qonnect_gitops.model", "qonnect_gitops.kb")
# pysyncobj's own: the nodes in its membership entries and full dumps.
PYSYNCOBJ_CLASSES: tuple[type, ...] = (TCPNode, Node)


def replicated_class(module: str, name: str) -> Any:
    """The class ``module.name`` a pickle of the log may build, or None: an enum, a
    msgspec record, a dataclass or a pydantic model of ``DATA_PACKAGES``, or one of
    ``PYSYNCOBJ_CLASSES``. Nothing with a constructor of consequence (a server, a store,
    a thread) qualifies, and no module outside those packages is imported."""
    for cls in PYSYNCOBJ_CLASSES:
        if (cls.__module__, cls.__qualname__) == (module, name):
            return cls
    if not any(module == package or module.startswith(package + ".") for package in DATA_PACKAGES):
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    if not isinstance(found, type) or found.__module__ != module:
        return None
    if issubclass(found, (enum.Enum, msgspec.Struct, pydantic.BaseModel)) or dataclasses.is_dataclass(found):
        return found
    return None


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """How pickle protocol 2 (journals and dumps written before protocol 4) spells bytes:
    ``_codecs.encode(text, "latin1")``. Only that codec."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise ForbiddenGlobal("_codecs.encode with another codec")
    return text.encode("latin1")


_BUILTINS: dict[tuple[str, str], Any] = {
    # Protocol 2 names the module __builtin__ and spells sets and bytes with globals.
    **{(module, "set"): set for module in ("builtins", "__builtin__")},
    **{(module, "frozenset"): frozenset for module in ("builtins", "__builtin__")},
    ("_codecs", "encode"): _latin1,
}


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle names a global the replicated log never carries."""


# (module, name) -> what it resolved to: every report batch's records name the same few.
_RESOLVED: dict[tuple[str, str], Any] = {}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        found = _RESOLVED.get(key)
        if found is None:
            found = _BUILTINS.get(key) or replicated_class(module, name)
            if found is None:
                raise ForbiddenGlobal(f"{module}.{name}"[:200])
            if len(_RESOLVED) < 1024:
                _RESOLVED[key] = found
        return found


def restricted_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Unpickle ``data`` building no class but those ``replicated_class`` allows
    (``ForbiddenGlobal`` otherwise). Replaces ``pysyncobj.pickle.loads``, whose fallback to the pure-Python
    unpickler for Python 2 pickles is not needed."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return _Unpickler(io.BytesIO(data)).load()


def restricted_load(file: BinaryIO) -> Any:
    """``restricted_loads`` of a file (pysyncobj's full dump)."""
    return _Unpickler(file).load()


def install() -> None:
    """Make pysyncobj pickle at ``RAFT_PICKLE_PROTOCOL`` and unpickle everything (messages,
    log entries, full dumps, the journal's header) with ``restricted_loads``. Idempotent;
    done at import."""
    # A module global read at each call (``dumps`` and ``dump``); not a class attribute,
    # so its two underscores are part of the name.
    setattr(pysyncobj_pickle, "__protocol", RAFT_PICKLE_PROTOCOL)
    pysyncobj_pickle.loads = restricted_loads
    pysyncobj_pickle.load = restricted_load
    pysyncobj_journal.loads = restricted_loads


install()
