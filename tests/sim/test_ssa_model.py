"""Property test: random forced applies by several managers against a small reference model.

The model states the documented rules for a flat map (ConfigMap ``data``):
applying sets values and claims ownership; a changed value is taken from its
other owners (forced); equal values are shared; keys a manager stops applying
lose that manager, and disappear when nobody owns them any more.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import config, dynamic

from qonnect_gitops.sim import SimCluster

MANAGERS = ["m1", "m2", "m3"]
KEYS = ["a", "b", "c", "d"]

steps = st.lists(st.tuples(st.sampled_from(MANAGERS),
                           st.dictionaries(st.sampled_from(KEYS), st.sampled_from(["x", "y"]), max_size=4)),
                 min_size=1, max_size=6)

_cluster = SimCluster(name="model")


def model(sequence: list[tuple[str, dict[str, str]]]) -> tuple[dict[str, str], dict[str, set[str]]]:
    data: dict[str, str] = {}
    owners: dict[str, set[str]] = {m: set() for m in MANAGERS}
    for manager, applied in sequence:
        for key, value in applied.items():
            if data.get(key) != value:
                for other in MANAGERS:
                    if other != manager:
                        owners[other].discard(key)
            data[key] = value
        dropped = owners[manager] - set(applied)
        owners[manager] = set(applied)
        for key in dropped:
            if not any(key in owners[m] for m in MANAGERS):
                data.pop(key, None)
    return data, owners


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
def test_forced_applies_match_the_model(sequence: list[tuple[str, dict[str, str]]]) -> None:
    url = _cluster.start()
    assert url
    dyn = dynamic.DynamicClient(config.new_client_from_config_dict(_cluster.kubeconfig()))
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    name = f"cm-{abs(hash(repr(sequence))) % 10**9}"
    if any(i.metadata.name == name for i in cms.get(namespace="default").items):
        cms.delete(name=name, namespace="default")  # hypothesis may replay a sequence
    out: Any = None
    for manager, applied in sequence:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}
        if applied:
            body["data"] = applied
        out = dyn.server_side_apply(cms, body=body, field_manager=manager, force_conflicts=True).to_dict()
    data, owners = model(sequence)
    assert (out.get("data") or {}) == data
    seen = {e["manager"]: set((e.get("fieldsV1") or {}).get("f:data", {})) - {"."}
            for e in out["metadata"].get("managedFields") or []}
    for manager in MANAGERS:
        assert seen.get(manager, set()) == {f"f:{k}" for k in owners[manager]}, (manager, seen, owners)


def teardown_module() -> None:
    _cluster.stop()
