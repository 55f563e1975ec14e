"""``RaftNode``: one member of the lead group, pysyncobj's ``SyncObj`` around the
Knowledge Base's state machine (``ReplicatedKB``).

It owns the ``SyncObj`` (timing, files, membership, the code version), reports on it
(leadership, members, tick gaps, collector pauses, the Raft port), and turns pysyncobj's
callbacks into blocking proposals with a timeout (``propose``, used by ``Commands``).
``_TimedSyncObj`` is pysyncobj's ``SyncObj`` with the lead's changes to its tick and its
message handler, and the Raft port of lead/raft/transport.py.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.monotonic import monotonic as pysyncobj_clock  # type: ignore[import-untyped]
from pysyncobj.utility import UtilityException  # type: ignore[import-untyped]

from qonnect_gitops.lead.raft.collector import GcPauses
from qonnect_gitops.lead.raft.commands import Commands
from qonnect_gitops.lead.raft.errors import ProposalError, fail_name, succeeded
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.state import CODE_VERSION, ReplicatedKB
from qonnect_gitops.lead.raft.timing import RaftTiming, TickGaps, compaction_spread
from qonnect_gitops.lead.raft.transport import FrameGuard, GuardedTransport, bind_address, utility
from qonnect_gitops.lead.threads import name_os_thread
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class _TimedSyncObj(SyncObj):  # type: ignore[misc]
    """``SyncObj`` that measures its tick gaps (``TickGaps``) and, after a gap longer than
    ``catch_up_after``, reads what its peers sent meanwhile before judging them.

    pysyncobj's tick checks its deadlines (a follower's election timeout, a leader's
    fallback) first and reads its sockets last. After a stall of its own thread (a
    garbage collection, the process not scheduled on a busy machine, another thread
    holding the interpreter) it judged the leader or the majority from before the stall:
    a follower whose thread stalled past its election timeout started an election
    although the leader's heartbeats were waiting in its socket, and a leader stalled
    past its fallback stepped down although its followers' answers were waiting in its
    own. Reading them first (a poll that does not wait) judges peers by what they did
    during the stall, as an unstalled node would have. A leader also adds its stall to
    its followers' last answer times: it sent them nothing meanwhile, so they had
    nothing to answer. Only this node's own stall is forgiven: a follower still starts
    an election when the leader's socket stayed silent through the stall (a leader
    starved that long looks dead to its followers, wherever they run).

    Its ``encryptor`` is the node's ``FrameGuard`` and its transport ``GuardedTransport``
    (lead/raft/transport.py): every frame between leads is sealed with the group's secret."""

    def __init__(self, *args: Any, tick_gaps: TickGaps, catch_up_after: float,
                 guard: FrameGuard, **kwargs: Any) -> None:
        self.tick_gaps = tick_gaps  # before the tick thread starts in SyncObj.__init__
        self._guard = guard  # before the transport is built in SyncObj.__init__
        self.catch_up_after = catch_up_after
        self.caught_up = 0  # ticks that read their sockets first after a stall
        # Per follower, the answer time a stall last moved: moved again only after a real
        # answer, so a leader that keeps stalling without hearing anyone still steps down.
        self._forgiven: dict[Any, float] = {}
        self._os_named = False
        super().__init__(*args, transportClass=GuardedTransport, **kwargs)

    @property
    def encryptor(self) -> FrameGuard:
        """What pysyncobj seals and opens every frame with (its ``password`` option's place)."""
        return self._guard

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if not self._os_named:
            self._os_named = True
            name_os_thread("raft")
        gap = self.tick_gaps.mark()
        if gap > self.catch_up_after:
            self.caught_up += 1
            self._poller.poll(0)
            self._forgive_own_silence(gap)
        super()._onTick(timeToWait)

    # pysyncobj's ``SyncObj.__onMessageReceived`` as Python names it: SyncObj registers
    # ``self.__onMessageReceived`` with its transport, which finds this override.
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """pysyncobj's message handler, except that an acknowledgement never moves a
        follower's next index back on the leader.

        The leader advances a follower's next index as it sends (the appends are
        pipelined on one ordered connection), and pysyncobj set it to whatever each
        successful acknowledgement names: one for an earlier append, arriving after later
        ones went out, made the leader send those again. The follower then deleted them
        from its journal and appended them anew (``truncating already-applied log
        entries`` when it had applied them). A refusal (``reset``) still sets the index
        wherever the follower says, as Raft wants after a lost or mismatched append."""
        next_index = getattr(self, "_SyncObj__raftNextIndex", None)  # pysyncobj 0.3's name
        ahead = None
        if (isinstance(next_index, dict) and isinstance(message, dict)
                and message.get("type") == "next_node_idx"
                and message.get("success") and not message.get("reset")):
            ahead = next_index.get(node)
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if ahead is not None and self._isLeader() and next_index is not None:
            if node in next_index and next_index[node] < ahead:
                next_index[node] = ahead

    def _forgive_own_silence(self, gap: float) -> None:
        """On the leader: followers answer only what it sends, and it sent nothing while it
        stalled; give each the stall on top of the fallback before judging (a follower
        silent for a whole fallback of the leader's activity still counts as gone). Once
        per answer: without one since the last stall forgiven, the silence is the
        follower's (or the network's), and a leader whose every tick is late (a starved,
        isolated one) must step down as it would without stalls."""
        if not self._isLeader():
            return
        answered = getattr(self, "_SyncObj__lastResponseTime", None)  # pysyncobj 0.3's name
        if not isinstance(answered, dict):
            return
        now = pysyncobj_clock()  # the clock pysyncobj keeps these times in
        for node, at in answered.items():
            if self._forgiven.get(node) == at:
                continue
            answered[node] = self._forgiven[node] = min(now, at + gap)


class RaftNode:
    """One member of the lead group."""

    def __init__(
        self,
        raft_addr: str,
        peers: list[str],
        data_dir: str | os.PathLike[str],
        timing: RaftTiming | None = None,
        *,
        secret: RaftSecret,
        bind: str | None = None,
    ) -> None:
        self.raft_addr = raft_addr
        self.timing = timing = timing or RaftTiming()
        # The Raft port: bound to ``bind`` or this lead's own address, never all of them,
        # and every frame sealed with the group's secret (lead/raft/transport.py).
        self.guard = FrameGuard(secret)
        listen = bind_address(raft_addr, bind)
        data = Path(data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.state = ReplicatedKB()
        # Every write to the KB, typed (lead/raft/commands.py).
        self.commands = Commands(self)
        spread = compaction_spread()
        conf = SyncObjConf(
            dynamicMembershipChange=True,
            # Both files: the journal holds every entry and the commit index, the dump
            # lets the journal be compacted. A dump alone loses the tail on kill -9.
            journalFile=str(data / "raft.journal"),
            fullDumpFile=str(data / "raft.dump"),
            raftMinTimeout=timing.election_min,
            raftMaxTimeout=timing.election_max,
            appendEntriesPeriod=timing.heartbeat,
            leaderFallbackTimeout=timing.leader_fallback,
            connectionRetryTime=timing.reconnect,
            connectionTimeout=max(1.0, timing.election_max * 2),
            # We batch reports ourselves; sending each of our batches at once (instead
            # of waiting for the next heartbeat period) cuts commit latency.
            appendEntriesUseBatch=False,
            # Dumps are written in-process: forking a threaded process is unsafe.
            useFork=False,
            # Each lead compacts at its own count and time (compaction_spread): the full dump
            # holds the Raft thread, and with one setting for all three every lead paused
            # at once (at 3,000 clusters 0.5-1.1 s, each time the leader lost its term).
            logCompactionMinEntries=max(1, round(timing.compaction_entries * spread)),
            logCompactionMinTime=timing.compaction_seconds * spread,
            commandsWaitLeader=True,
            # Peers are often DNS names whose address changes when a lead restarts
            # (a StatefulSet pod gets a new IP). pysyncobj caches lookups for 600 s by
            # default, so the others kept dialling the old address for minutes.
            dnsCacheTime=5.0,
            dnsFailCacheTime=1.0,
            bindAddress=listen,
        )
        others = [p for p in peers if p and p != raft_addr]
        # Half the fallback: a stall that long is worth a line in the log.
        self.tick_gaps = TickGaps(warn_above=timing.leader_fallback / 2)
        self.gc_pauses = GcPauses.install()
        # Released by destroy, or when this node is dropped without it: the recorder
        # never outlives its node (finalize runs its function once).
        self._release_gc_pauses = weakref.finalize(self, self.gc_pauses.release)
        try:
            # A tick waits up to pysyncobj's tick period (0.05 s) for its sockets: a gap
            # of twice that is a stall worth reading the sockets first for.
            self.sync = _TimedSyncObj(raft_addr, others, conf=conf, consumers=[self.state],
                                      tick_gaps=self.tick_gaps,
                                      catch_up_after=2 * conf.autoTickPeriod, guard=self.guard)
        except BaseException:
            self._release_gc_pauses()
            raise

    # ----------------------------------------------------------- leadership

    def is_leader(self) -> bool:
        """Leadership is a belief: we hold it only while Raft says so AND a majority
        is connected. pysyncobj keeps an isolated leader in state leader until the
        fallback timeout; the quorum check closes most of that window."""
        return bool(self.sync._isLeader() and self.sync.hasQuorum)

    def code_version(self) -> int:
        """The pysyncobj code version the group runs (``setCodeVersion``): a replicated
        method of a higher version must not be proposed yet (older leads cannot apply it)."""
        return int(self.sync.getCodeVersion())

    def term(self) -> int:
        """The current Raft term of this node."""
        return int(self.sync.raftCurrentTerm)

    def leader_addr(self) -> str | None:
        """The leader as this node knows it, or None.

        ``getStatus()['leader']`` may still name a dead node; we only name a leader
        we are connected to (or ourselves when we hold a quorum)."""
        if self.is_leader():
            return self.raft_addr
        node = self.sync._getLeader()
        if node is None or node.address == self.raft_addr:
            return None
        return node.address if self.sync.isNodeConnected(node) else None

    def raft_state(self) -> str:
        """``leader``, ``candidate`` or ``follower`` as Raft says (not the belief above)."""
        return {0: "follower", 1: "candidate", 2: "leader"}.get(
            int(self.sync.getStatus()["state"]), "unknown"
        )

    def members(self) -> list[dict[str, Any]]:
        """Every member's Raft address, whether we are connected to it, and who is us."""
        result = [{"raft": self.raft_addr, "connected": True, "self": True}]
        for node in sorted(self.sync.otherNodes, key=lambda n: n.address):
            result.append(
                {"raft": node.address, "connected": bool(self.sync.isNodeConnected(node)),
                 "self": False}
            )
        return result

    def raft_status(self) -> dict[str, Any]:
        """The numbers an operator needs from Raft."""
        st = self.sync.getStatus()
        return {
            "state": self.raft_state(),
            "term": int(st["raft_term"]),
            "commitIndex": int(st["commit_idx"]),
            "lastApplied": int(st["last_applied"]),
            "logLength": int(st["log_len"]),
            "hasQuorum": bool(st["has_quorum"]),
            "ready": bool(self.sync.isReady()),
            # How long the Raft thread went without a tick: since start, lately, and how
            # often it exceeded half the leader fallback.
            "longestTickGapSeconds": round(self.tick_gaps.longest, 3),
            "recentTickGapSeconds": round(self.tick_gaps.recent(), 3),
            "tickStalls": self.tick_gaps.stalls,
            "longestGcPauseSeconds": round(self.gc_pauses.longest, 3),
            "longestGcPauseGeneration": self.gc_pauses.longest_generation,
            # What the collector cost this process so far: its share of the CPU.
            "gcCollections": self.gc_pauses.collections,
            "gcCpuSeconds": round(self.gc_pauses.total_cpu, 3),
            # The Raft port: which secret seals, which are accepted, what was refused.
            "transport": self.guard.snapshot(),
        }

    # ---------------------------------------------------------------- writes

    def propose(self, timeout: float, command: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a replicated ``command`` of ``self.state`` with its arguments and wait until
        this node applied it; returns its result (both typed by the command). The writes of
        the lead go through ``self.commands``, which names each command.

        Raises ProposalError when it was not committed within ``timeout``. Note that a
        timed-out proposal may still commit later: commands must be idempotent.
        """
        return cast(R, _answer(lambda done: cast(Any, command)(*args, callback=done, **kwargs), timeout))

    def change_membership(self, action: str, raft_addr: str, timeout: float = 10.0) -> None:
        """Add or remove one lead. One change at a time; wait for it before the next."""
        if action == "add":
            _answer(lambda done: self.sync.addNodeToCluster(raft_addr, callback=done), timeout)
        elif action == "remove":
            _answer(lambda done: self.sync.removeNodeFromCluster(raft_addr, callback=done), timeout)
        else:
            raise ValueError(f"unknown membership action {action!r}")

    # ---------------------------------------------------------- code version

    def enable_code_version(self, timeout: float = 2.0) -> int:
        """On the leader: raise the group's code version to the newest that every member
        runs (at most ``CODE_VERSION``), as each says over pysyncobj's admin protocol
        (``status``: ``self_code_version``, sealed like every Raft frame). A member that
        does not answer holds it where it is: during a rolling upgrade an older lead
        would fail on entries it does not know. Returns the version the group runs."""
        current = self.code_version()
        if current >= CODE_VERSION or not self.is_leader():
            return current
        target = CODE_VERSION
        for node in sorted(self.sync.otherNodes, key=lambda n: n.address):
            try:
                status = utility(self.guard, timeout).executeCommand(node.address, ["status"])
            except UtilityException as exc:
                log.info("raft_code_version_unknown", member=node.address, error=str(exc))
                return current
            version = status.get("self_code_version", 0) if isinstance(status, dict) else None
            if not isinstance(version, int):
                log.info("raft_code_version_unknown", member=node.address, error="no status")
                return current
            if version < target:
                log.info("raft_code_version_behind", member=node.address, version=version)
                target = version
        if target <= current:
            return current
        try:
            _answer(lambda done: self.sync.setCodeVersion(target, callback=done), timeout)
        except ProposalError as exc:
            log.warning("raft_code_version_not_enabled", version=target, error=exc.reason)
            return self.code_version()
        log.info("raft_code_version_enabled", version=target, was=current)
        return target

    def destroy(self) -> None:
        """Stop the Raft node (closes sockets; the files stay) and release its garbage
        collector recorder. Safe to call twice."""
        self.sync.destroy()
        self._release_gc_pauses()


def _answer(start: Callable[[Callable[[Any, int], None]], object], timeout: float) -> Any:
    """Start a pysyncobj call with ``start(callback)`` and wait for pysyncobj's answer: the
    call's result, or ProposalError (``timeout``, or the reason pysyncobj gives)."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def on_result(result: Any, err: int) -> None:
        box["result"], box["err"] = result, err
        done.set()

    start(on_result)
    if not done.wait(timeout):
        raise ProposalError("timeout")
    if not succeeded(box["err"]):
        raise ProposalError(fail_name(box["err"]))
    return box["result"]
