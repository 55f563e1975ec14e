"""A plan described for people and programs: the JSON of ``qonnect plan --format json``
and the markdown table that decision commits and pull requests of proposals carry (with
the goals the decision cannot meet)."""

from __future__ import annotations

import json
import re

from qonnect_gitops.model.plan import Plan


def plan_json(p: Plan) -> str:
    """The plan as sorted, indented JSON: byte-identical for the same plan."""
    current = p.current()
    data = {
        "reason": p.reason,
        "placements": p.placements(),
        "unplaced": [u.model_dump(mode="json") for u in p.unplaced],
        "unmet": [u.model_dump(mode="json") for u in p.unmet],
        "moves": [m.model_dump(mode="json", by_alias=True) for m in p.moves],
        "components": {k: v.model_dump(mode="json") for k, v in p.components.items()},
        "lastMoved": {k: v.isoformat().replace("+00:00", "Z") for k, v in p.last_moved.items()},
        # With placements and lastMoved, what the next `qonnect plan --current` reads.
        "requests": {k: v.model_dump(mode="json") for k, v in current.requests.items()},
        "draining": current.draining,
    }
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False)


def score_text(score: float | None) -> str:
    """An assignment's score for tables (its breakdown is in the JSON)."""
    return "-" if score is None else f"{score:.3f}"


def md_code(text: object, cell: bool = False) -> str:
    """``text`` as an inline code span nothing in it can leave, so no input (a backtick in a
    YAML key, a link, an @mention, HTML) is rendered, nor posted live under a bot's name: on one
    line, fenced by one backtick more than the longest run in it, and padded with a space each
    side where markdown would otherwise eat an edge (it drops one such pair). In a table
    ``cell``, '|' becomes U+2223 (DIVIDES, alike): tables split rows on pipes before they see code spans."""
    flat = " ".join(str(text).splitlines())
    if cell:
        flat = flat.replace("|", "\u2223")
    fence = "`" * (1 + max((len(run) for run in _BACKTICKS.findall(flat)), default=0))
    if not flat:
        return "` `"  # an empty pair of fences is one run of two: it could pair with a later span's
    pad = " " if flat[:1] == "`" or flat[-1:] == "`" or (flat[:1] == flat[-1:] == " " and flat.strip()) else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


_BACKTICKS = re.compile("`+")


def _md(text: object) -> str:
    return "-" if text is None else md_code(text, cell=True)


def plan_markdown(p: Plan) -> str:
    """The table a pull request of proposed placements shows."""
    lines = [f"### Proposed placement ({p.reason})", ""]
    if p.unmet:
        lines += [f"**{len(p.unmet)} goal(s) not met**: see *Unmet goals* below.", ""]
    lines += ["| Component | Cluster | Replicas | Score | Why |", "|---|---|---:|---:|---|"]
    for key, cp in p.components.items():
        for a in cp.assignments:
            lines.append(f"| `{key}` | {a.cluster} | {a.replicas} | {score_text(a.score)} | {_md(a.reason)} |")
        for d in cp.draining:
            lines.append(f"| `{key}` | {d.cluster} | -{d.replicas} draining | - | {_md(d.reason)} |")
    if p.moves:
        lines += ["", "#### Moves", "", "| Component | From | To | Replicas | Reason | Detail |", "|---|---|---|---:|---|---|"]
        for m in p.moves:
            lines.append(f"| `{m.component}` | {_md(m.source)} | {_md(m.target)} | {m.replicas} | {m.reason} | {_md(m.detail)} |")
    if p.unplaced:
        lines += ["", "#### Unplaced", "", "| Component | Replicas | Per replica | Near | Why |", "|---|---:|---|---|---|"]
        for u in p.unplaced:
            lines.append(f"| `{u.component}` | {u.replicas} | {u.cpu} CPU, {u.memory}, {'/'.join(u.architectures)} | {_md(u.near)} | {_md(u.reason)} |")
    if p.unmet:
        lines += ["", "#### Unmet goals", "", "| Component | Goal | Why |", "|---|---|---|"]
        for goal in p.unmet:
            lines.append(f"| `{goal.component}` | {goal.goal} | {_md(goal.message)} |")
    if p.provisioning is not None and (p.provisioning.clusters or p.provisioning.events):
        lines += ["", "#### Cloud bursting", "", "| Cluster | Pool | Phase | Nodes | Why |", "|---|---|---|---:|---|"]
        for c in p.provisioning.clusters:
            lines.append(f"| {c.name} | {c.pool} | {c.phase} | {c.nodes} | {_md(c.reason)} |")
        for e in p.provisioning.events:
            lines.append(f"| {_md(e.cluster)} | {e.pool} | {e.action} | {e.nodes or ''} | {_md(e.detail)} |")
    return "\n".join(lines)
