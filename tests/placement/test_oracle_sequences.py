"""Issue 32: sequences of 3 to 6 cycles over random fleets, apps and events, every cycle
checked by the independent oracle (``placement/oracle.py``).

Each cycle feeds the last plan back as the placement in force, as the leader does. The
events are what a fleet lives through: time passing cooldowns, resizes and scale-downs,
goal edits, node pools shrinking and nodes turning not ready (reported by agents, who
report the free capacity the plan's replicas leave), clusters failing and returning,
clusters removed from the goals, clusters cordoned (Degraded, Stalled, Silent) and
components that do not run where they were placed (issue 31). CI draws a fixed set of
examples (tests/conftest.py); a local run draws new ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import oracle, plan
from tests.placement.builders import NOW, goals, replaced
from tests.placement.test_properties import COOLDOWN, REGIONS, apps, fleets

EVENTS = ("nothing", "later", "fail", "recover", "edit", "resize", "scale-down", "shrink", "not-ready",
          "report", "remove", "cordon", "uncordon", "not-running", "progressing", "running", "measure")
STATES = ("Degraded", "Stalled", "Silent")
REASONS = {"Degraded": "ApiUnavailable", "Stalled": "PruneLimitExceeded", "Silent": "EvictionsPaused"}


@st.composite
def sequences(draw: st.DrawFn) -> tuple[Any, ...]:
    fleet, links = draw(fleets())
    comps = draw(apps())
    events = draw(st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 1000)), min_size=2, max_size=5))
    return fleet, links, comps, events


def _edited(g: Goals, k: int) -> Goals:
    """One component's goals edited: request, replicas, envelope, availability, tiers or
    architectures."""
    comps = list(g.components())
    c = comps[k % len(comps)]
    q = c.qos.model_dump(by_alias=True, exclude_unset=True)
    choice = k % 6
    if choice == 0:
        c = dataclasses.replace(c, replicas=1 + k % 4)
    elif choice == 1:
        c = dataclasses.replace(c, architectures=frozenset((("amd64",), ("arm64",), ("amd64", "arm64"))[k % 3]))
    else:
        if choice == 2:
            q["latency"] = [{"region": REGIONS[k % 2], "maxMs": float(5 + k % 50)}]
        elif choice == 3:
            q["availability"] = {"minClusters": 1 + k % 3, "spread": bool(k % 2)}
        elif choice == 4:
            q["tiers"] = [("edge", "fog", "cloud")[k % 3]]
        else:
            q["latency"] = [{"region": r, "maxMs": float(3 + (k + i) % 30), "serve": "nearest"}
                            for i, r in enumerate(REGIONS)]
        c = dataclasses.replace(c, qos=QoS.model_validate(q))
    return replaced(g, c)


@dataclass
class World:
    """The goals and what agents report, as events change them."""

    g: Goals
    now: datetime = NOW
    down: set[str] = field(default_factory=set)
    shrunk: dict[str, int] = field(default_factory=dict)  # cluster -> nodes left (reported)
    not_ready: set[str] = field(default_factory=set)  # clusters whose first reported node is not ready
    states: dict[str, str] = field(default_factory=dict)  # cordoned clusters and their state
    pairs: dict[tuple[str, str], str] = field(default_factory=dict)  # (component, cluster) -> state
    measured: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, event: str, k: int, last: Plan | None) -> None:
        names = sorted(self.g.clusters)
        name = names[k % len(names)]
        placed = sorted((key, cl) for key, where in (last.placements() if last else {}).items() for cl in where)
        if event == "later":
            self.now += timedelta(seconds=COOLDOWN + 1)
        elif event == "fail":
            self.down.add(name)
        elif event == "recover" and self.down:
            self.down.discard(sorted(self.down)[k % len(self.down)])
        elif event == "edit":
            self.g = _edited(self.g, k)
        elif event in ("resize", "scale-down"):
            comps = list(self.g.components())
            c = comps[k % len(comps)]
            if event == "resize":
                c = dataclasses.replace(c, cpu=max(250, c.cpu * 2 if k % 2 else c.cpu // 2))
            else:
                c = dataclasses.replace(c, replicas=max(1, c.replicas - 1 - k % 2))
            self.g = replaced(self.g, c)
        elif event == "shrink":
            self.shrunk[name] = k % 2  # one node left, or none
        elif event == "not-ready":
            self.not_ready.add(name)
        elif event == "report":
            self.shrunk.setdefault(name, 3)  # reported as declared (at most three nodes)
        elif event == "remove" and len(names) > 2:
            self._remove(name)
        elif event == "cordon":
            self.states[name] = STATES[k % 3]
        elif event == "uncordon" and self.states:
            del self.states[sorted(self.states)[k % len(self.states)]]
        elif event in ("not-running", "progressing") and placed:
            self.pairs[placed[k % len(placed)]] = "NotRunning" if event == "not-running" else "Progressing"
        elif event == "running":
            self.pairs.clear()
        elif event == "measure":
            self.measured = [{"from": name, "to": REGIONS[k % 2], "ms": float(k % 90)}]
        self.now += timedelta(seconds=10)

    def _remove(self, name: str) -> None:
        g = self.g
        clusters = {n: c for n, c in g.clusters.items() if n != name}
        latencies = {pair: ms for pair, ms in g.latencies.items() if name not in pair}
        self.g = Goals(g.fleet, clusters, g.network, g.apps, latencies)
        for table in (self.down, self.not_ready):
            table.discard(name)
        self.shrunk.pop(name, None)
        self.states.pop(name, None)
        self.measured = [m for m in self.measured if name not in (m["from"], m["to"])]
        self.pairs = {pair: s for pair, s in self.pairs.items() if pair[1] != name}

    def observed(self, last: Plan | None) -> Observed:
        clusters: dict[str, dict[str, Any]] = {}
        for name in sorted(self.g.clusters):
            entry: dict[str, Any] = {}
            if name in self.down:
                entry["healthy"] = False
            if name in self.states:
                entry["state"] = self.states[name]
                entry["reason"] = REASONS[self.states[name]]
            if name in self.shrunk or name in self.not_ready:
                entry["nodes"] = self._nodes(name, last)
            if entry:
                clusters[name] = entry
        # Agents report the pairs of the placement in force (draining ones included).
        in_force = {(key, cl) for key, cp in (last.components.items() if last else ())
                    for cl in cp.replicas_by_cluster(include_draining=True)}
        workloads = [{"component": key, "cluster": cl, "state": s, "readyReplicas": 0}
                     for (key, cl), s in sorted(self.pairs.items()) if (key, cl) in in_force]
        return Observed.model_validate({
            "now": self.now.isoformat(), "clusters": clusters, "latencies": self.measured,
            "traffic": [{"component": c.key, "region": "r1", "rps": 250.0} for c in self.g.components()
                        if c.qos.scaling], "workloads": workloads,
        })

    def _nodes(self, name: str, last: Plan | None) -> list[dict[str, Any]]:
        """The cluster's nodes as its agent reports them: the declared shapes (at most three
        nodes; ``shrunk``: fewer), free capacity net of what the last plan runs there
        (first fit, biggest first: what does not fit is pending, not running)."""
        nodes: list[list[Any]] = []
        for shape in self.g.clusters[name].spec.nodes:
            for _ in range(min(shape.count, 3)):
                nodes.append([shape.arch, shape.cpu, shape.memory, shape.cpu, shape.memory])
        nodes = nodes[: min(self.shrunk.get(name, 3), 3)]
        load: list[tuple[int, int, frozenset[str]]] = []
        for key, cp in (last.components.items() if last else ()):
            c = next((x for x in self.g.components() if x.key == key), None)
            if c is None:
                continue
            n = cp.replicas_by_cluster(include_draining=True).get(name, 0)
            load += [(c.cpu, c.memory, c.architectures)] * n
        for cpu, memory, archs in sorted(load, key=lambda r: (-r[0], -r[1])):
            for node in nodes:
                if node[0] in archs and node[3] >= cpu and node[4] >= memory:
                    node[3] -= cpu
                    node[4] -= memory
                    break
        return [{"name": f"n{i}", "arch": arch, "ready": not (i == 0 and name in self.not_ready),
                 "allocatable": {"cpu": f"{cpu}m", "memory": str(memory)},
                 "free": {"cpu": f"{free_cpu}m", "memory": str(free_memory)}}
                for i, (arch, cpu, memory, free_cpu, free_memory) in enumerate(nodes)]


def repro(fleet: list[Any], links: list[tuple[str, str, float]], comps: list[Component],
          events: list[tuple[str, int]]) -> str:
    """A failing example in the builders' terms, to paste into a regression test."""
    lines = ["fleet = ["]
    for c in fleet:
        spec = c.spec
        nodes = [{"count": s.count, "cpu": f"{s.cpu}m", "memory": str(s.memory), "arch": s.arch} for s in spec.nodes]
        taints = tuple(t.model_dump() for t in spec.taints)
        lines.append(f"    cluster({c.name!r}, tier={spec.tier!r}, region={spec.region!r}, nodes={nodes}, "
                     f"taints={taints}, cpu_hour={spec.cost.cpu_hour}),")
    lines.append("]")
    lines.append(f"links = {links!r}")
    lines.append("comps = [")
    for c in comps:
        qos = c.qos.model_dump(by_alias=True, exclude_unset=True)
        lines.append(f"    component({c.name!r}, replicas={c.replicas}, cpu={c.cpu}, memory={c.memory}, "
                     f"kind={c.kind!r}, arch={tuple(sorted(c.architectures))!r}, calls={c.calls!r}, qos={qos!r}, "
                     f"budget={c.stability.disruption_budget}, colocate={c.colocate_with!r}),")
    lines.append("]")
    lines.append(f"events = {events!r}")
    return "\n".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sequences())
def test_every_cycle_of_every_sequence_passes_the_oracle(sequence: tuple[Any, ...]) -> None:
    fleet, links, comps, events = sequence
    world = World(goals(fleet, comps, links=links, regions=REGIONS))
    current = CurrentPlacement()
    last: Plan | None = None
    for cycle, (event, k) in enumerate([("nothing", 0), *events]):
        world.apply(event, k, last)
        obs = world.observed(last)
        p = plan(world.g, obs, current)
        findings = oracle.check(world.g, obs, current, p, before=last)
        assert not findings, (f"cycle {cycle} ({event} {k}):\n{oracle.problems(findings)}\n"
                              f"{repro(fleet, links, comps, events)}")
        current, last = p.current(), p
