"""How the files here were written: with the lead code of main at 985807a (before branch heads),
as `PYTHONPATH=<main checkout>:. python written_by.py <dir>`; the lead listened on 127.0.0.1:28874
(a lone group), compacted after 6 entries (raft.dump), and the journal holds the entries after.
expected.json is the KB those entries make."""
import sys, time
from pathlib import Path
from qonnect_gitops.lead.raft import RaftNode, RaftTiming


from tests.ports import free_ports
from tests.kb.transitions import _entry, T0
addr = "127.0.0.1:%d" % free_ports(1)[0]
timing = RaftTiming(compaction_entries=6, compaction_seconds=3600)
node = RaftNode(addr, [addr], Path(sys.argv[1]), timing)
while not node.is_leader(): time.sleep(0.05)
node.propose(node.state.leader, "lead-1", node.term(), T0)
for i in range(8):
    node.propose(node.state.member, f"lead-{i}", f"10.0.0.{i}:4321", f"10.0.0.{i}:8080", f"http://10.0.0.{i}:8080", T0 + i)
# give the dump a moment
time.sleep(1.5)
node.propose(node.state.plan, {"shop/web": {"edge-1": 2}}, {}, "new goals", "c1" * 20, node.term(), T0 + 10, [])
node.propose(node.state.dynamic, {"burst-1": {"pool": "cloud", "phase": "Provisioning", "nodes": 1, "tier": "cloud", "region": "eu-central"}}, T0 + 11)
node.propose(node.state.pool_token, "burst-1", "ab" * 32, T0 + 12)
node.propose(node.state.proposal_rejected, "key-1", "p1", "c1" * 20, "https://forge/pr/1", T0 + 13)
node.propose(node.state.goals_failure, "d1" * 20, ["qonnect.yaml:1:1: bad"], T0 + 14)
node.propose(node.state.member_removed, "10.0.0.7:4321", T0 + 15)
kb = node.state.reader().read(lambda kb: kb.to_dict())
node.destroy()
import json; Path(sys.argv[1], "expected.json").write_text(json.dumps(kb, sort_keys=True, indent=1))
print(addr)
