"""The Raft port (lead/raft/transport.py): bound to the address given; nothing a peer sends
is decoded before its frame's MAC checks under the group's secret; frames are bound to
their connection and numbered; a key holder's frames build no class but the log's data;
connections that have not authenticated are bounded; the secret rotates without a gap."""

from __future__ import annotations

import ipaddress
import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.kb.records import WorkloadRecord
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.pickling import restricted_loads
from qonnect_gitops.lead.raft.secret import RaftSecret, RaftSecretError, new_secret
from qonnect_gitops.lead.raft.timing import RaftTiming
from qonnect_gitops.lead.raft.transport import RAFT_MESSAGE_LEVEL, FrameGuard, FrameLimits, FrameRefusal, FrameRefused
from qonnect_gitops.model.status import SyncState
from tests.lead.harness import LeadGroup, report
from tests.load import scaled
from tests.ports import free_ports

_LENGTH = struct.Struct("i")


class _Marker:
    """Unpickled, it creates the file at ``path``: what a payload that runs code does."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def _frame(payload: bytes) -> bytes:
    """``payload`` framed as pysyncobj frames a message: its length, then the bytes."""
    return _LENGTH.pack(len(payload)) + payload


def _as_pysyncobj_sends(message: Any) -> bytes:
    """A message as pysyncobj without a password sends it: a zlib-compressed pickle."""
    return _frame(zlib.compress(pickle.dumps(message), 3))


def _until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the peer sends until it closes the connection (AssertionError if it
    does not within ``timeout``)."""
    sock.settimeout(timeout)
    received = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    except (ConnectionResetError, BrokenPipeError):
        return received
    except TimeoutError:
        raise AssertionError(f"the connection stayed open for {timeout:.1f} s") from None


def _send_and_wait_close(addr: str, data: bytes, timeout: float = 5.0) -> None:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            return  # closed while we still sent: refused
        _until_closed(sock, scaled(timeout))


def _listening(port: int) -> list[str]:
    """The local addresses a socket LISTENs on at ``port`` (Linux /proc/net/tcp[6])."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] == "0A" and int(port_hex, 16) == port:
                # Each 32-bit word in host order (pysyncobj replaces socket.inet_ntop: ipaddress).
                words = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8))
                found.append(str(ipaddress.ip_address(words)))
    return found


def _kb_view(group: LeadGroup) -> list[dict[str, Any]]:
    """What must not change: per lead its term, leader, the leader's record, the members and
    the placement in force."""
    views = []
    for lead in group.leads:
        st = group.status(lead)
        assert st is not None, group.log_tails()
        views.append({"term": st["term"], "leader": (st["leader"] or {}).get("raft"),
                      "leaderRecord": st["leaderRecord"], "members": sorted(m["raft"] for m in st["members"]),
                      "generation": st["generation"], "placements": st["placements"],
                      "goals": (st["goals"]["lastGood"] or {}).get("commit")})
    return views


def test_a_non_member_can_neither_run_code_nor_change_anything(api_group: LeadGroup, tmp_path: Path) -> None:
    """A pickle that would create a file when unpickled, sent to every lead's Raft port as
    pysyncobj frames it, sealed under another secret, and garbage: each connection is
    closed, nothing runs, the group keeps its leader, term and Knowledge Base, and each
    lead counts what it refused."""
    group = api_group
    marker = tmp_path / "ran"
    before = _kb_view(group)
    payload = pickle.dumps(_Marker(marker))
    wrong_key = FrameGuard(RaftSecret.generate())
    attempts = [
        _as_pysyncobj_sends(_Marker(marker)),  # what pysyncobj without a password reads
        _frame(wrong_key.seal(zlib.compress(payload))),  # sealed, but not with the group's secret
        _frame(os.urandom(3000)),  # garbage of a plausible length
        os.urandom(3000),  # garbage
        _LENGTH.pack(2**31 - 1) + os.urandom(65536),  # a 2 GiB frame announced
    ]
    for lead in group.leads:
        for data in attempts:
            _send_and_wait_close(lead.raft, data)
    assert not marker.exists(), "a non-member's pickle ran inside a lead"
    for lead in group.leads:
        def counted(lead: Any = lead) -> bool:
            refused = ((group.status(lead) or {}).get("self", {}).get("transport") or {}).get("refused", {})
            return sum(r["count"] for r in refused.values()) >= len(attempts)
        group.wait_until(counted, what=f"{lead.node_id} counting the refused connections")
    assert _kb_view(group) == before
    leader = group.wait_leader()
    code, _, body = group.post(leader, "/v1/clusters/edge-1/report", report("edge-1"),
                               token=group.tokens["edge-1"])
    assert code == 200, body
    assert not marker.exists()


def test_the_raft_port_listens_on_the_address_given_only(api_group: LeadGroup) -> None:
    """Started with ``--raft 127.0.0.1:P``, a lead listens on 127.0.0.1 alone: not on the
    wildcard, so not on the host's other addresses (127.0.0.2 stands for them: a socket
    bound to 0.0.0.0 answers there, one bound to 127.0.0.1 does not)."""
    for lead in api_group.leads:
        port = int(lead.raft.rsplit(":", 1)[1])
        assert _listening(port) == ["127.0.0.1"], (lead.node_id, _listening(port))
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()


# ------------------------------------------------------------- in one process


class _Peer:
    """A client of a node's Raft port speaking its framing with ``guard``'s secret (or
    replaying recorded frames)."""

    def __init__(self, addr: str, guard: FrameGuard) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=scaled(5))
        self.guard = guard
        self.sent: list[bytes] = []

    def send(self, message: Any) -> bytes:
        frame = _frame(self.guard.seal(zlib.compress(pickle.dumps(message))))
        self.send_frame(frame)
        return frame

    def send_frame(self, frame: bytes) -> None:
        self.sent.append(frame)
        self.sock.sendall(frame)

    def receive(self) -> Any:
        head = self._exactly(4)
        return self.guard.open(self._exactly(_LENGTH.unpack(head)[0]))

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def handshake(self, claim: str) -> bytes:
        """pysyncobj's handshake as a member dials: our key, its key back, our address."""
        ours = os.urandom(32)
        self.send(ours)
        theirs_for_us, seq, theirs = self.receive()
        assert (theirs_for_us, seq) == (ours, 0)
        self.send((theirs, 0, claim))
        return theirs

    def close(self) -> None:
        self.sock.close()


def _wait(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _connected(node: RaftNode, raft: str) -> bool:
    return any(m["raft"] == raft and m["connected"] for m in node.members())


@pytest.fixture
def lone(tmp_path: Path) -> Iterator[tuple[RaftNode, str, RaftSecret]]:
    """A node whose group names a second member that never starts: the tests play it.
    The second member's address sorts after the node's, so the node waits for it to dial."""
    ports = sorted(free_ports(2), key=lambda p: f"127.0.0.1:{p}")
    addr, member = (f"127.0.0.1:{p}" for p in ports)
    secret = RaftSecret.generate()
    node = RaftNode(addr, [addr, member], tmp_path / "n", RaftTiming(), secret=secret)
    try:
        yield node, member, secret
    finally:
        node.destroy()


def test_frames_replayed_on_the_same_or_another_connection_are_refused(
        lone: tuple[RaftNode, str, RaftSecret]) -> None:
    node, member, secret = lone
    peer = _Peer(node.raft_addr, FrameGuard(secret))
    peer.handshake(member)
    _wait(lambda: _connected(node, member), "the member's connection")
    hello, identity = peer.sent
    peer.send_frame(identity)  # the same frame again on its connection: its number is taken
    _until_closed(peer.sock, scaled(5))
    assert node.guard.refusals(FrameRefusal.WRONG_SESSION) == 1
    _wait(lambda: not _connected(node, member), "the member's connection closing")

    again = _Peer(node.raft_addr, FrameGuard(secret))
    again.send_frame(hello)  # a recorded handshake opens: the node answers with a fresh key
    again.receive()
    again.send_frame(identity)  # ...which the recorded identity does not carry
    _until_closed(again.sock, scaled(5))
    assert node.guard.refusals(FrameRefusal.WRONG_SESSION) == 2
    assert not _connected(node, member)


def test_a_key_holder_cannot_run_code_in_a_lead(lone: tuple[RaftNode, str, RaftSecret],
                                                tmp_path: Path) -> None:
    node, member, secret = lone
    marker = tmp_path / "ran"
    peer = _Peer(node.raft_addr, FrameGuard(secret))
    peer.send(_Marker(marker))  # sealed with the group's secret, as the handshake frame
    _until_closed(peer.sock, scaled(5))
    peer = _Peer(node.raft_addr, FrameGuard(secret))
    theirs = peer.handshake(member)
    _wait(lambda: _connected(node, member), "the member's connection")
    peer.send((theirs, 1, {"type": "append_entries", "payload": _Marker(marker)}))
    _until_closed(peer.sock, scaled(5))
    assert not marker.exists()
    assert node.guard.refusals(FrameRefusal.FORBIDDEN_GLOBAL) == 2
    assert node.state.reader().read(lambda kb: kb.generation) == 0


def test_connections_that_do_not_authenticate_are_bounded(lone: tuple[RaftNode, str, RaftSecret]) -> None:
    node, member, secret = lone
    node.guard.limits = FrameLimits(handshake_seconds=1.0, unauthenticated_per_host=4)
    host, port = node.raft_addr.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=scaled(5)) for _ in range(6)]
    try:
        for sock in idle[4:]:  # over the per-host cap: closed at once
            _until_closed(sock, scaled(3))
        for sock in idle[:4]:  # the others when the handshake deadline passes
            _until_closed(sock, scaled(5))
    finally:
        for sock in idle:
            sock.close()
    assert node.guard.refusals(FrameRefusal.TOO_MANY_UNAUTHENTICATED) == 2
    assert node.guard.refusals(FrameRefusal.HANDSHAKE_TIMEOUT) == 4
    _send_and_wait_close(node.raft_addr, _LENGTH.pack(5000) + b"x" * 5000)  # over the handshake's size
    assert node.guard.refusals(FrameRefusal.OVERSIZED) == 1
    peer = _Peer(node.raft_addr, FrameGuard(secret))  # a member still gets in
    peer.handshake(member)
    _wait(lambda: _connected(node, member), "the member's connection")
    peer.close()


def _until_leader(nodes: list[RaftNode]) -> RaftNode:
    found: list[RaftNode] = []

    def one() -> bool:
        found[:] = [n for n in nodes if n.is_leader()]
        return len(found) == 1
    _wait(one, "a leader", 20)
    return found[0]


def test_the_secret_rotates_without_a_gap_and_a_wrong_one_fails_closed(tmp_path: Path) -> None:
    """Two leads, each with its own copy of the secret file, edited as
    docs/operations-leads.md says: add the new secret, seal with it, drop the old one. The
    leads stay connected and commit at every step; a lead given a secret the other does
    not accept is cut off, and a file that no longer parses changes nothing."""
    old, new, stranger = new_secret(), new_secret(), new_secret()
    files = [tmp_path / "a.secret", tmp_path / "b.secret"]
    for path in files:
        path.write_text(old + "\n")
    addrs = [f"127.0.0.1:{p}" for p in free_ports(2)]
    nodes = [RaftNode(addr, addrs, tmp_path / f"n{i}", RaftTiming(), secret=RaftSecret.load(path))
             for i, (addr, path) in enumerate(zip(addrs, files))]
    try:
        def commits(step: str) -> None:
            leader = _until_leader(nodes)
            # Committed, or ProposalError: the answer itself does not matter.
            leader.commands.register_member(step, "10.0.0.9:7001", "10.0.0.9:8080", "http://x", time.time(),
                                            timeout=scaled(5))
            for node in nodes:
                assert node.guard.refusals(FrameRefusal.BAD_MAC) == 0, step

        def write(path: Path, *lines: str) -> None:
            path.write_text("".join(line + "\n" for line in lines))
            index = files.index(path)
            _wait(lambda: nodes[index].guard.secret.fingerprints == RaftSecret.load(path).fingerprints,
                  f"{path.name} reloaded")

        commits("start")
        for path in files:  # 1. every lead accepts the new secret
            write(path, old, new)
        commits("both accepted")
        for path in files:  # 2. every lead seals with it
            write(path, new, old)
        commits("sealing with the new")
        for path in files:  # 3. the old one goes
            write(path, new)
        commits("old secret gone")

        files[0].write_text("short\n")  # unparseable: the lead keeps what it has
        time.sleep(2.5)
        assert nodes[0].guard.secret.fingerprints == RaftSecret.load(files[1]).fingerprints
        commits("a broken file kept the secret")

        write(files[0], stranger)  # a secret the other lead does not know: cut off
        _wait(lambda: sum(node.guard.refusals(FrameRefusal.BAD_MAC) for node in nodes) > 0,
              "the stranger's frames refused")
        _wait(lambda: not any(m["connected"] for m in nodes[1].members() if not m["self"]),
              "the lead with a foreign secret cut off")
    finally:
        for node in nodes:
            node.destroy()


# ------------------------------------------------------------------ the pieces


def test_a_secret_file_names_the_line_it_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(f"# rotated 2026-01\n\n{new_secret()}\nshort\n")
    with pytest.raises(RaftSecretError, match=rf"{path}:4: a secret of 5 characters; expected at least 32"):
        RaftSecret.load(path)
    path.write_text("# nothing\n")
    with pytest.raises(RaftSecretError, match="no secret"):
        RaftSecret.load(path)
    with pytest.raises(RaftSecretError, match="cannot read"):
        RaftSecret.load(tmp_path / "absent")
    one = new_secret()
    path.write_text(f"{one}\n{new_secret()}\n")
    two = RaftSecret.load(path)
    assert len(two.keys) == 2 and two.fingerprints[0] == RaftSecret.from_lines([one]).fingerprints[0]
    assert one not in repr(two.fingerprints)


def test_a_frame_opens_only_under_the_group_secret_and_within_its_limits() -> None:
    secret = RaftSecret.generate()
    guard = FrameGuard(secret)
    message = {"type": "append_entries", "entries": [(b"\x01" + b"x" * 9000, 7, 3)]}
    sealed = guard.seal(zlib.compress(pickle.dumps(message), RAFT_MESSAGE_LEVEL))
    assert guard.open(sealed) == message
    # pysyncobj asked for level 3; the leads compress at RAFT_MESSAGE_LEVEL (cheaper per entry).
    assert secret.keys[0].decrypt(sealed) == zlib.compress(pickle.dumps(message), RAFT_MESSAGE_LEVEL)
    with pytest.raises(FrameRefused) as refused:
        FrameGuard(RaftSecret.generate()).open(sealed)
    assert refused.value.reason is FrameRefusal.BAD_MAC
    tampered = bytearray(sealed)
    tampered[40] ^= 1
    with pytest.raises(FrameRefused):
        guard.open(bytes(tampered))
    small = FrameGuard(secret, FrameLimits(message_bytes=1000))
    with pytest.raises(FrameRefused) as refused:
        small.open(guard.seal(zlib.compress(b"\0" * 100_000)))  # a bomb: 100 KB from 100 bytes
    assert refused.value.reason is FrameRefusal.OVERSIZED


def test_the_log_unpickles_its_own_data_and_nothing_else(tmp_path: Path) -> None:
    records = {"workloads": {"shop/web": WorkloadRecord("Deployment", "d1")}, "state": SyncState.READY,
               "seen": {1, 2}, "frozen": frozenset({"a"}), "batch": b"\xff\x00" * 10}
    for protocol in (2, 4):  # 2: journals and dumps written before protocol 4
        assert restricted_loads(pickle.dumps(records, protocol)) == records
    for forbidden in (_Marker(tmp_path / "ran"), os.system, RaftNode, FrameGuard):
        with pytest.raises(pickle.UnpicklingError):
            restricted_loads(pickle.dumps(forbidden))
    assert not (tmp_path / "ran").exists()
    hostile = (b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00xq\x01X\x09\x00\x00\x00zlib_codecq\x02"
               b"\x86q\x03Rq\x04.")  # _codecs.encode with a codec other than latin1
    with pytest.raises(pickle.UnpicklingError):
        restricted_loads(hostile)
