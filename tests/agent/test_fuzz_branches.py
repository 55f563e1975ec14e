"""A fuzzer over cluster branches: one agent, against the simulated cluster, syncs a long run of
random commits (random YAML, random objects, kinds, names and namespaces, reserved and
foreign ones included, alias bombs, deep nesting, large files, symlink entries, random
trailers). After every pass: it ended with a state and a reason of the shared vocabulary
(never an exception), within bounded time and memory, and every object the agent did not
create is still there, unchanged, unless a commit opted it in for adoption (never in a
reserved namespace).
"""

from __future__ import annotations

import time
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client

from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.model.limits import RESERVED_NAMESPACES
from qonnect_gitops.model.status import (
    MAX_MESSAGE,
    RefusalReason,
    SyncReason,
    SyncState,
)
from tests.agent.conftest import LABELS, Branch, configmap, namespace
from tests.agent.test_hostile_branches import _commit
from tests.fuzz import max_rss_mib, plausible_files, yaml_files

NAMESPACES = st.sampled_from(["shop", "shop", "shop", "other", "kube-system", "default", "qonnect-system", "bad ns"])
FOREIGN = [("kube-system", "coredns"), ("other", "web"), ("other", "a")]  # ConfigMaps the agent did not create


def _create_foreign(core: client.CoreV1Api) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="other")))
    core.create_namespaced_config_map("kube-system", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="coredns"), data={"Corefile": ".:53"}))
    core.create_namespaced_config_map("other", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="web", labels={"team": "other"}), data={"k": "theirs"}))
    core.create_namespaced_config_map("other", client.V1ConfigMap(  # a forged ownership label
        metadata=client.V1ObjectMeta(name="a", labels=LABELS), data={"k": "lookalike"}))


def _snapshot(core: client.CoreV1Api) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    for ns, name in FOREIGN:
        try:
            cm = core.read_namespaced_config_map(name, ns)
            out[(ns, name)] = (cm.metadata.uid, cm.data, cm.metadata.labels)
        except client.ApiException as exc:
            assert exc.status == 404
            out[(ns, name)] = None
    out[("", "other")] = core.read_namespace("other").metadata.uid
    return out


def _adopts(files: dict[str, bytes]) -> set[tuple[str, str]]:
    """(namespace, name) of the objects a commit opts in for adoption."""
    found = set()
    for body in files.values():
        try:
            docs = list(yaml.safe_load_all(body))
        except (yaml.YAMLError, ValueError, RecursionError):  # hostile files need not parse
            docs = []
        for doc in docs:
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            if isinstance(meta, dict) and (meta.get("annotations") or {}).get("qonnect.io/adopt") == "enabled":
                found.add((str(meta.get("namespace") or ""), str(meta.get("name"))))
                if doc.get("kind") == "Namespace":
                    found.add(("", str(meta.get("name"))))
    return found


@st.composite
def commits(draw: st.DrawFn) -> tuple[dict[str, bytes], dict[str, bytes], int, list[tuple[str, str]]]:
    """Files, symlink entries, a generation step (1 forward, 0 the same, -1 back) and extra trailers."""
    hostile = draw(st.booleans())
    bodies = draw(st.lists(yaml_files(NAMESPACES) if hostile else plausible_files(NAMESPACES), max_size=4))
    files = {"_cluster/namespace-shop.yaml": yaml.safe_dump(namespace("shop")).encode(),
             "shop/web/configmap-base.yaml": yaml.safe_dump(configmap("base")).encode()}
    for i, body in enumerate(bodies):
        folder = draw(st.sampled_from(["shop/web", "_cluster", "other/x", "deep/er/still"]))
        name = draw(st.sampled_from([f"f{i}.yaml", f"f{i}.yml", f"sops-f{i}.yaml", f"f{i}.txt"]))
        files[f"{folder}/{name}"] = body
    links = {"link.yaml": b"/etc/passwd"} if draw(st.integers(0, 5)) == 0 else {}
    step = draw(st.sampled_from([1, 1, 1, 1, 0, -1]))
    extra: list[tuple[str, str]] = []
    if draw(st.booleans()):
        extra.append((tr.ALLOW_EMPTY, draw(st.sampled_from(["true", "TRUE", "false", "yes"]))))
    if draw(st.booleans()):
        extra.append((tr.PRUNE_LIMIT, draw(st.sampled_from(["1", "5", "1000", "-3", "many", "9" * 5000]))))
    return files, links, step, extra


def test_random_branches_end_in_the_vocabulary_and_never_touch_foreign_objects(make_agent, branch: Branch, core):
    _create_foreign(core)
    before = _snapshot(core)
    adopted: set[tuple[str, str]] = set()
    branch.publish([namespace("shop"), configmap("base")])
    agent = make_agent(api_retries=2, ready_timeout=2.0)
    assert agent.sync().state == SyncState.READY

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(commit=commits())
    def one_commit(commit: tuple[dict[str, bytes], dict[str, bytes], int, list[tuple[str, str]]]) -> None:
        files, links, step, extra = commit
        _commit(branch, files, max(0, branch.generation + step), extra, links=links)
        adopted.update(_adopts(files))
        start = time.process_time()  # CPU (the agent's and the in-process sim's), not wall-clock
        result = agent.sync()
        assert time.process_time() - start < 90
        assert max_rss_mib() < 1500
        event(f"{result.state}/{result.reason}")
        assert isinstance(result.state, SyncState)
        assert result.reason in set(SyncReason), result.reason
        assert len(result.message) <= 4 * MAX_MESSAGE or result.state != SyncState.STALLED
        for refusal in result.refusals:
            assert refusal.reason in set(RefusalReason) and len(refusal.message) <= MAX_MESSAGE
        agent.build_report(result)  # the report the leads would get validates
        now = _snapshot(core)
        for key, was in before.items():
            if key in adopted and key[0] not in RESERVED_NAMESPACES:
                continue  # the goals opted this object in: the agent may own it now
            assert now[key] == was, (key, was, now[key], result.reason, result.message)

    one_commit()
