"""The full dump: captured on the Raft thread, pickled, compressed and written off it.

``ReplicatedKB._serialize`` hands pysyncobj a ``StateCapture`` (copies of the state's
containers) instead of the plain dict; ``_BackgroundDump``, pysyncobj's serializer for
the lead, builds the dict, pickles it (``_pickled``: the collector off, other threads
let run), compresses and writes it on a thread of its own, and frees it a section entry
at a time (``_drop_gradually``). Measured in docs/operations-leads.md (*Is Raft starved?*)
and ``benchmarks/raft_dump.py``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import gzip
import io
import os
import pickle
import threading
import time
from typing import TYPE_CHECKING, Any

import pysyncobj.serializer as pysyncobj_serializer  # type: ignore[import-untyped]
import pysyncobj.syncobj as pysyncobj_syncobj  # type: ignore[import-untyped]
from pysyncobj.atomic_replace import atomicReplace  # type: ignore[import-untyped]
from pysyncobj.config import SERIALIZER_STATE  # type: ignore[import-untyped]

from qonnect_gitops.lead.raft.pickling import RAFT_PICKLE_PROTOCOL
from qonnect_gitops.logs import get_logger

if TYPE_CHECKING:
    from qonnect_gitops.kb import KnowledgeBase

log = get_logger(__name__)


def _fast_dump_compression() -> None:
    """Have pysyncobj write its full dump with gzip level 1 instead of 9.

    The dump is written on the Raft thread (``useFork=False``). Measured on a dump of
    3,000 clusters: level 9 took 0.78 s for 2.2 MB, level 1 0.02 s for a file 30 %
    larger; at 10,000 clusters level 9 stalled the tick for seconds and every lead
    lost its leader at once (they compact at the same entry count). The file is gzip
    either way, so dumps written before and after read the same."""
    class _Gzip:  # the one name pysyncobj's serializer uses from the gzip module
        @staticmethod
        def GzipFile(*args: Any, **kwargs: Any) -> gzip.GzipFile:
            if "w" in str(kwargs.get("mode", args[1] if len(args) > 1 else "rb")):
                kwargs.setdefault("compresslevel", 1)
            return gzip.GzipFile(*args, **kwargs)

    pysyncobj_serializer.gzip = _Gzip


_fast_dump_compression()


class StateCapture:
    """A replica's state taken for a full dump (``KnowledgeBase.capture``), to be turned
    into the plain dict the dump stores (``to_dict``) off the Raft thread.

    It stands in pysyncobj's dump data where the consumer's dict goes, and never reaches
    the file: ``_BackgroundDump`` replaces it by ``plain()`` before pickling. It serves one
    dump: that dump empties its containers as it frees the dict (``_drop_gradually``)."""

    __slots__ = ("_kb",)

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    def plain(self) -> dict[str, Any]:
        """The state as the plain dict the dump stores."""
        return self._kb.to_dict()

    def __reduce__(self) -> Any:
        raise TypeError("a StateCapture is turned into plain() before a dump is pickled")


def _detached(data: Any) -> Any:
    """pysyncobj's dump data ``(consumers' data, last entry, entry before, cluster)`` made
    safe to pickle on another thread: deep-copied (the little pysyncobj itself puts
    there may change with the next tick), except the ``StateCapture``s, which nothing
    changes and which are the bulk."""
    parts = data[0] if isinstance(data[0], list) else [data[0]]
    keep = {id(part): part for part in parts if isinstance(part, StateCapture)}
    return copy.deepcopy(data, keep)


def _plain(data: Any) -> Any:
    """``data`` with every ``StateCapture`` among the consumers' data replaced by its plain
    dict: exactly what pysyncobj would have pickled without captures."""
    first = data[0]
    if isinstance(first, list):
        first = [part.plain() if isinstance(part, StateCapture) else part for part in first]
    elif isinstance(first, StateCapture):
        first = first.plain()
    return (first, *data[1:])


class _YieldingPickler(pickle.Pickler):
    """The C pickler, made to let other threads run while it works.

    ``pickle.dumps`` holds the interpreter lock from start to end: 0.11-0.26 s for the
    state of 10,000 clusters, and the Raft thread waits that long on the dump's thread.
    A ``persistent_id`` written in Python is called for every object, and each call is a
    point where the interpreter hands the lock to a thread waiting for it. It names no
    object persistent, so the bytes are those of ``pickle.dumps`` (about 1.5x the CPU)."""

    def persistent_id(self, obj: Any) -> None:
        return None


def _pickled(data: Any) -> bytes:
    """``_plain(data)`` pickled as pysyncobj pickles its dumps (the same bytes), with the
    collector off and other threads let run.

    The plain dict is a large acyclic structure of every report, and the collections its
    allocations set off walked everything alive (a 0.47 s full collection at 10,000
    clusters, every thread stopped). It is dropped before the collector is back, so what
    it allocated is freed, not left for the next collection to walk."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        plain = _plain(data)
        try:
            out = io.BytesIO()
            _YieldingPickler(out, RAFT_PICKLE_PROTOCOL).dump(plain)
            return out.getvalue()
        finally:
            _drop_gradually(plain[0])
    finally:
        if was_enabled:
            gc.enable()


def _drop_gradually(consumers: Any) -> None:
    """Empty the consumers' plain dicts of a dump a section entry at a time (one cluster's
    report, say). Dropped at once, the state of 10,000 clusters was freed in one C call
    of 36-200 ms with the interpreter lock held, and the Raft thread waited; between two
    entries other threads get their turn. Only for what the dump's thread owns: the
    dicts ``to_dict`` built from a capture (whose containers are the capture's own) and
    the deep copy ``_detached`` made of the rest."""
    for part in consumers if isinstance(consumers, list) else [consumers]:
        if not isinstance(part, dict):
            continue
        for section in part.values():
            if isinstance(section, dict):
                while section:
                    section.popitem()


class _BackgroundDump(pysyncobj_serializer.Serializer):  # type: ignore[misc]
    """pysyncobj's full dump with the compression and the file written off the Raft thread.

    Without fork (``useFork=False``, see ``RaftNode``) pysyncobj pickled, compressed and
    wrote the dump inside a tick: at 10,000 clusters every lead's Raft thread was held
    4-12 s at a time on a busy machine (``stall_probe`` saw it in ``gzip.write``) and
    the term moved each time. The Raft thread now only captures the state (``ReplicatedKB``
    gives a ``StateCapture``: copies of the containers, whose values no later entry
    changes) and copies pysyncobj's own few values; a thread builds the plain dict,
    pickles, compresses and writes it, and replaces the file the same way (zlib and file
    writes release the interpreter lock). The file is the same gzip of the same pickle, so
    dumps written before and after read the same. Until the thread is done pysyncobj
    sees ``SERIALIZING``: it keeps its log, starts no other dump and sends no dump to a
    follower; a failed write is reported as ``FAILED`` and the log kept, as before; a
    dump arriving from the leader meanwhile cancels it (``setTransmissionData``).
    Anything but a plain file dump (no file, fork, a custom serializer) is pysyncobj's."""

    def __init__(self, fileName: str | None, transmissionBatchSize: int, tryUseFork: bool,
                 serializer: Any, deserializer: Any, serializeChecker: Any) -> None:
        super().__init__(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer,
                         serializeChecker)
        self._file = fileName
        self._background = (fileName is not None and serializer is None and serializeChecker is None
                            and not (tryUseFork and hasattr(os, "fork")))
        self._writer: threading.Thread | None = None
        self._written = False
        self._id: Any = None
        # Set when the leader's dump supersedes the one being written; checked, under
        # ``_replacing``, before that one replaces the file.
        self._cancelled = threading.Event()
        self._replacing = threading.Lock()
        self._count = 0  # dumps started: each writes its own temporary file

    def serialize(self, data: Any, id: Any) -> None:
        if not self._background:
            super().serialize(_plain(data), id)
            return
        if self._writer is not None:
            return
        detached = _detached(data)  # the state as of ``id``: all the Raft thread does
        self._id, self._written = id, False
        self._cancelled = threading.Event()
        self._count += 1
        # pysyncobj's own flag for "a dump is being written": no dump is sent meanwhile.
        self._Serializer__pid = -3
        self._writer = threading.Thread(
            target=self._write, args=(detached, self._cancelled, f"{self._file}.{self._count}.writing"),
            name="raft-dump", daemon=True)
        self._writer.start()

    def _write(self, data: Any, cancelled: threading.Event, temporary: str) -> None:
        assert self._file is not None
        started = time.perf_counter()
        try:
            payload = _pickled(data)
            with open(temporary, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                             compresslevel=1) as packed:
                packed.write(payload)
            with self._replacing:
                superseded = cancelled.is_set()
                if not superseded:
                    atomicReplace(temporary, self._file)
                    self._written = True
            if superseded:
                os.remove(temporary)
                log.info("raft_dump_superseded", seconds=round(time.perf_counter() - started, 3))
            else:
                log.info("raft_dump_written", bytes=len(payload),
                         seconds=round(time.perf_counter() - started, 3))
        except Exception as exc:
            log.error("raft_dump_failed", error=exc)
            with contextlib.suppress(OSError):
                os.remove(temporary)

    def setTransmissionData(self, data: Any) -> bool:
        """A follower receiving the leader's dump: a dump of its own still being made
        would replace the newer file with an older state once done, so it is cancelled
        and forgotten (pysyncobj never hears of it, and keeps its log for it). Cancelled,
        not waited for: building and pickling it takes about a second at 10,000 clusters,
        and this runs on the Raft thread. Under ``_replacing``: either it replaced the file
        already (the leader's replaces it next) or it never will."""
        if self._writer is not None:
            with self._replacing:
                self._cancelled.set()
            self._writer = None
            self._Serializer__pid = 0
        return bool(super().setTransmissionData(data))

    def checkSerializing(self) -> tuple[int, Any]:
        if not self._background:
            return super().checkSerializing()  # type: ignore[no-any-return]
        writer = self._writer
        if writer is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if writer.is_alive():
            return SERIALIZER_STATE.SERIALIZING, self._id
        self._writer = None
        self._Serializer__pid = 0
        if not self._written:
            return SERIALIZER_STATE.FAILED, self._id
        self._Serializer__transmissions: dict[Any, Any] = {}  # what pysyncobj drops after a new dump
        return SERIALIZER_STATE.SUCCESS, self._id


# pysyncobj builds its serializer by this module-level name (pysyncobj 0.3).
pysyncobj_syncobj.Serializer = _BackgroundDump
