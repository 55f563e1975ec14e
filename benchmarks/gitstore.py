"""Benchmark of the Git store at fleet scale: 1,000 clusters with about 10 manifests each.

Run from the project root::

    PYTHONPATH=. python benchmarks/gitstore.py           # readable table
    PYTHONPATH=. python benchmarks/gitstore.py --json    # one JSON object
    PYTHONPATH=. python benchmarks/gitstore.py --signing-only --clusters 10000   # signing cost

Everything runs on loopback: a bare repository served by ``git daemon``, the lead's
mirror, and an agent's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.gitstore import DecisionMeta
from qonnect_gitops.gitstore.daemon import GitDaemon
from qonnect_gitops.gitstore.remote import Mirror, narrow_fetch
from qonnect_gitops.gitstore.signing import SigningKey
from qonnect_gitops.gitstore.store import GitStore
from tests.gitstore.helpers import CountingProxy

MANIFEST = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: {app}-{n}
  namespace: {app}
  labels:
    app.kubernetes.io/managed-by: qonnect
    qonnect.io/cluster: {cluster}
  annotations:
    qonnect.io/plan-generation: "{gen}"
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {app}-{n}}}
  template:
    metadata:
      labels: {{app: {app}-{n}}}
    spec:
      containers:
        - name: main
          image: registry.example.org/{app}/svc-{n}:1.{n}.0
          resources:
            requests: {{cpu: {cpu}m, memory: {mem}Mi}}
"""


def fleet_plan(clusters: int, manifests: int, gen: int = 1) -> dict[str, bytes]:
    """placement.yaml plus ``manifests`` Deployments per cluster, each distinct."""
    files = {"placement.yaml": "".join(f"c{c:04d}: {manifests} components\n" for c in range(clusters)).encode()}
    for c in range(clusters):
        for n in range(manifests):
            text = MANIFEST.format(app=f"app{n % 3}", n=n, cluster=f"c{c:04d}", gen=1,
                                   replicas=1 + (c + n) % 3, cpu=100 + 10 * n, mem=64 * (1 + n % 4))
            files[f"clusters/c{c:04d}/app{n % 3}/deploy-{n}.yaml"] = text.encode()
    return files


def loose_objects(path: Path) -> int:
    """Loose object count as git reports it."""
    out = subprocess.run(["git", "-C", str(path), "count-objects", "-v"], capture_output=True, text=True, check=True).stdout
    return int(dict(line.split(": ") for line in out.splitlines())["count"])


def packs(path: Path) -> int:
    """Pack count as git reports it."""
    out = subprocess.run(["git", "-C", str(path), "count-objects", "-v"], capture_output=True, text=True, check=True).stdout
    return int(dict(line.split(": ") for line in out.splitlines())["packs"])


def run(clusters: int, manifests: int) -> dict[str, float | int]:
    """Do the whole scenario and return the figures."""
    figures: dict[str, float | int] = {"clusters": clusters, "manifests_per_cluster": manifests}
    names = [f"c{c:04d}" for c in range(clusters)]
    with tempfile.TemporaryDirectory(prefix="qonnect-bench-") as tmp:
        root = Path(tmp)
        srv = root / "srv"
        srv.mkdir()
        served = pygit2.init_repository(str(srv / "goals.git"), bare=True)
        sig = pygit2.Signature("op", "op@example.org", 1_700_000_000, 0)
        tb = served.TreeBuilder()
        tb.insert("qonnect.yaml", served.create_blob(b"review: false\n"), pygit2.enums.FileMode.BLOB)
        served.create_commit("refs/heads/main", sig, sig, "goals", tb.write(), [])
        files = fleet_plan(clusters, manifests)

        with GitDaemon(srv) as daemon:
            url = daemon.url("goals.git")
            mirror = Mirror(root / "lead.git", url, gc=False)
            mirror.fetch()
            source = mirror.main_commit() or ""

            t = time.perf_counter()
            first = mirror.store.write_decision(
                files, summary="Initial placement", body="bench", clusters=names, timestamp=1_700_000_100,
                meta=DecisionMeta(source, 1, 1, "goals-changed"))
            figures["fanout_1000_s"] = time.perf_counter() - t
            figures["fanout_commits"] = len(first.clusters)

            t = time.perf_counter()
            pub = mirror.publish()
            figures["push_1000_s"] = time.perf_counter() - t
            figures["push_refs"] = len(pub.pushed)
            figures["push_count"] = pub.pushes

            figures["loose_objects_before_gc"] = loose_objects(root / "lead.git")
            figures["gc_auto_s"] = mirror.gc_auto()
            figures["loose_objects_after_gc"] = loose_objects(root / "lead.git")

            t = time.perf_counter()
            idle = mirror.store.write_decision(
                files, summary="Nothing changed", body="bench", clusters=names, timestamp=1_700_000_150,
                meta=DecisionMeta(source, 1, 2, "rescheduling"))
            figures["idle_cycle_s"] = time.perf_counter() - t
            assert not idle.wrote_anything

            files[f"clusters/{names[clusters // 2]}/app0/deploy-0.yaml"] += b"# changed\n"
            t = time.perf_counter()
            second = mirror.store.write_decision(
                files, summary="One cluster changed", body="bench", clusters=names, timestamp=1_700_000_200,
                meta=DecisionMeta(source, 1, 2, "scaling"))
            figures["fanout_one_changed_s"] = time.perf_counter() - t
            figures["one_changed_commits"] = len(second.clusters)

            t = time.perf_counter()
            mirror.publish()
            figures["push_one_changed_s"] = time.perf_counter() - t

            # Worst case of the per-cycle `git gc --auto`: when it does trigger (here forced by
            # a pack limit of 1) it repacks everything the mirror holds.
            subprocess.run(["git", "-C", str(root / "lead.git"), "config", "gc.autoPackLimit", "1"], check=True)
            figures["packs_before_repack"] = packs(root / "lead.git")
            figures["gc_auto_repack_s"] = mirror.gc_auto()
            figures["packs_after_repack"] = packs(root / "lead.git")

            # Through a byte-counting relay: the agent's fetch goes through git (protocol v2),
            # which does not report what it received.
            with CountingProxy(daemon.port) as proxy:
                agent = narrow_fetch(root / "agent.git", f"git://127.0.0.1:{proxy.port}/goals.git",
                                     f"cluster/{names[7]}")
                figures["narrow_fetch_bytes"] = proxy.total()
            figures["narrow_fetch_s"] = agent.seconds

            everything = pygit2.init_repository(str(root / "everything.git"), bare=True)
            t = time.perf_counter()
            stats = everything.remotes.create_anonymous(url).fetch(["+refs/*:refs/*"])
            figures["full_fetch_s"] = time.perf_counter() - t
            figures["full_fetch_bytes"] = stats.received_bytes
            figures["full_fetch_objects"] = stats.received_objects
    return figures


class _TimedSigner:
    """A signing key that counts its signatures and the CPU seconds they took."""

    def __init__(self, key: SigningKey) -> None:
        self.key = key
        self.public = key.public
        self.count = 0
        self.seconds = 0.0

    def sign_commit(self, content: bytes) -> bytes:
        start = time.process_time()
        signed = self.key.sign_commit(content)
        self.seconds += time.process_time() - start
        self.count += 1
        return signed


def signing(clusters: int, manifests: int) -> dict[str, float | int]:
    """What signing every commit costs a first fan-out of ``clusters`` clusters (one plan commit
    and a commit per cluster, all signed): the same decision written unsigned and signed
    (Ed25519, then RSA 3072), CPU seconds of the whole write and of the signatures alone."""
    figures: dict[str, float | int] = {}
    names = [f"c{c:04d}" for c in range(clusters)]
    files = fleet_plan(clusters, manifests)
    meta = DecisionMeta("0" * 40, 1, 1, "goals-changed")
    with tempfile.TemporaryDirectory(prefix="qonnect-bench-sign-") as tmp:
        keys: dict[str, _TimedSigner | None] = {"unsigned": None}
        for name, private in (("ed25519", ed25519.Ed25519PrivateKey.generate()),
                              ("rsa3072", rsa.generate_private_key(public_exponent=65537, key_size=3072))):
            keys[name] = _TimedSigner(SigningKey(private))
        for name, signer in keys.items():
            store = GitStore.init_bare(Path(tmp) / f"{name}.git", signer=signer)
            start = time.process_time()
            written = store.write_decision(files, summary="Initial placement", body="bench", clusters=names,
                                           timestamp=1_700_000_100, meta=meta)
            figures[f"fanout_{name}_cpu_s"] = time.process_time() - start
            if signer is not None:
                figures[f"signatures_{name}"] = signer.count
                figures[f"signing_{name}_cpu_s"] = signer.seconds
                figures[f"signing_{name}_us_per_commit"] = 1e6 * signer.seconds / max(signer.count, 1)
            assert len(written.clusters) == clusters
    figures["loadavg_1m"] = os.getloadavg()[0]
    return figures


GOALS = {"fanout_1000_s": 3.0, "fanout_one_changed_s": 0.3}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--manifests", type=int, default=10)
    parser.add_argument("--signing-only", action="store_true",
                        help="only the cost of signing every commit of a first fan-out (no git daemon)")
    args = parser.parse_args(argv)
    figures = {} if args.signing_only else run(args.clusters, args.manifests)
    figures.update(signing(args.clusters, args.manifests))
    if args.json:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))
        return 0
    rows = [(k, f"{v:.3f}" if isinstance(v, float) else v, f"<= {GOALS[k]}" if k in GOALS else "")
            for k, v in figures.items()]
    print(format_table(("FIGURE", "VALUE", "GOAL"), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
