"""Two leaders, each with its own mirror, race on the plan branch of one daemon-served repository."""

from __future__ import annotations

import threading
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore import DecisionMeta, FanOutStale, StaleRef
from qonnect_gitops.gitstore.remote import Mirror

from .helpers import Served, git, plan_files, trailers_of

CLUSTERS = ["c0", "c1", "c2"]


def attempt(mirror: Mirror, writer: str, stamp: int) -> str:
    """One cycle: re-read, decide generation head+1, publish. Returns the plan commit or raises StaleRef."""
    mirror.fetch()
    head = mirror.store.plan_head()
    generation = mirror.store.decision_of(head).generation + 1 if head else 1
    files = plan_files(3, tag=f"{writer}-{generation}")
    source = mirror.main_commit()
    assert source is not None
    result = mirror.store.write_decision(
        files, summary=f"{writer} decides generation {generation}", body="race",
        meta=DecisionMeta(source, 1, generation, "rescheduling"), clusters=CLUSTERS,
        timestamp=1_700_000_000 + stamp, expected_plan=head)
    assert result.plan_commit is not None
    try:
        mirror.publish()
    except FanOutStale as exc:
        # The decision is on the remote; a newer leader's fan-out beat ours.
        assert exc.plan_commit == result.plan_commit
    return result.plan_commit


def history(bare: Path) -> list[tuple[str, int, str]]:
    lines = git("-C", bare, "log", "--first-parent", "--reverse",
                "--format=%H %(trailers:key=Qonnect-Generation,valueonly,separator=) %s", "qonnect/plan")
    out = []
    for line in lines.splitlines():
        commit, gen, subject = line.split(" ", 2)
        out.append((commit, int(gen), subject))
    return out


def test_lockstep_rounds_exactly_one_winner(served: Served, tmp_path: Path) -> None:
    mirrors = {w: Mirror(tmp_path / f"{w}.git", served.url, gc=False) for w in ("a", "b")}
    rounds = 6
    barrier = threading.Barrier(2)
    outcomes: dict[str, list[str | None]] = {w: [] for w in mirrors}
    errors: list[BaseException] = []

    def run(writer: str) -> None:
        try:
            for r in range(rounds):
                barrier.wait(timeout=30)
                try:
                    outcomes[writer].append(attempt(mirrors[writer], writer, r))
                except StaleRef:
                    outcomes[writer].append(None)
                barrier.wait(timeout=30)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(w,)) for w in mirrors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for r in range(rounds):
        won = [w for w in mirrors if outcomes[w][r] is not None]
        assert len(won) == 1, f"round {r}: winners {won}"
    winners = [c for w in mirrors for c in outcomes[w] if c is not None]
    hist = history(served.bare)
    assert [g for _, g, _ in hist] == list(range(1, rounds + 1))
    assert sorted(winners) == sorted(c for c, _, _ in hist)


def test_free_running_writers_lose_no_decision(served: Served, tmp_path: Path) -> None:
    mirrors = {w: Mirror(tmp_path / f"{w}.git", served.url, gc=False) for w in ("a", "b")}
    per_writer = 5
    won: dict[str, list[str]] = {w: [] for w in mirrors}
    rejections: dict[str, int] = {w: 0 for w in mirrors}
    errors: list[BaseException] = []

    def run(writer: str) -> None:
        stamp = 0
        try:
            while len(won[writer]) < per_writer:
                stamp += 1
                try:
                    won[writer].append(attempt(mirrors[writer], writer, stamp))
                except StaleRef:
                    rejections[writer] += 1  # re-read and re-plan on the next loop
                if stamp > 200:
                    raise AssertionError(f"{writer} starved")
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in mirrors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    hist = history(served.bare)
    assert [g for _, g, _ in hist] == list(range(1, 2 * per_writer + 1))  # strictly increasing, no gaps
    assert sorted(c for c, _, _ in hist) == sorted(won["a"] + won["b"])  # every acknowledged decision is there
    # The next cycle (of either leader) brings the cluster branches to the last decision.
    settle = mirrors["a"]
    settle.fetch()
    settle.store.fan_out(settle.store.plan_head())  # type: ignore[arg-type]
    settle.publish()
    last_commit, last_gen, _ = hist[-1]
    repo = pygit2.Repository(str(served.bare))
    for c in CLUSTERS:
        assert trailers_of(served.bare, f"cluster/{c}")["Qonnect-Generation"] == [str(last_gen)]
        assert repo.revparse_single(f"cluster/{c}").tree_id == repo.revparse_single(f"{last_commit}:clusters/{c}").id
