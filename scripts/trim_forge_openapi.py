"""Trim a forge's published OpenAPI (or Swagger 2.0) description to the operations qonnect uses.

    python scripts/trim_forge_openapi.py github FULL.json OUT.json --source TEXT

FULL is the forge's whole description (JSON or YAML). OUT keeps the listed operations,
every component/definition they reference (transitively), and the document header; media
type ``examples`` (documentation only) are dropped. The fake forge
(``qonnect_gitops.forge.fake``) validates requests and answers against OUT.
Where each FULL came from is recorded in ``qonnect_gitops/forge/fake/openapi/SOURCES.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

# (method, path) per forge: every call the clients in qonnect_gitops.forge make, plus the
# merge a reviewer does (the demo merges through the API).
OPERATIONS: dict[str, list[tuple[str, str]]] = {
    "github": [
        ("get", "/repos/{owner}/{repo}/pulls"),
        ("post", "/repos/{owner}/{repo}/pulls"),
        ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
        ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}"),
        ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
        ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
        ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
        ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
        ("post", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
        ("post", "/repos/{owner}/{repo}/statuses/{sha}"),
        ("get", "/repos/{owner}/{repo}/commits/{ref}/statuses"),
    ],
    "gitea": [
        ("get", "/repos/{owner}/{repo}/pulls"),
        ("post", "/repos/{owner}/{repo}/pulls"),
        ("get", "/repos/{owner}/{repo}/pulls/{index}"),
        ("patch", "/repos/{owner}/{repo}/pulls/{index}"),
        ("post", "/repos/{owner}/{repo}/pulls/{index}/merge"),
        ("get", "/repos/{owner}/{repo}/issues/{index}/comments"),
        ("post", "/repos/{owner}/{repo}/issues/{index}/comments"),
        ("patch", "/repos/{owner}/{repo}/issues/comments/{id}"),
        ("post", "/repos/{owner}/{repo}/issues/{index}/labels"),
        ("get", "/repos/{owner}/{repo}/labels"),
        ("post", "/repos/{owner}/{repo}/labels"),
        ("post", "/repos/{owner}/{repo}/statuses/{sha}"),
        ("get", "/repos/{owner}/{repo}/commits/{ref}/statuses"),
    ],
    "gitlab": [
        ("get", "/api/v4/projects/{id}/merge_requests"),
        ("post", "/api/v4/projects/{id}/merge_requests"),
        ("get", "/api/v4/projects/{id}/merge_requests/{merge_request_iid}"),
        ("put", "/api/v4/projects/{id}/merge_requests/{merge_request_iid}"),
        ("put", "/api/v4/projects/{id}/merge_requests/{merge_request_iid}/merge"),
        ("post", "/api/v4/projects/{id}/statuses/{sha}"),
        ("get", "/api/v4/projects/{id}/repository/commits/{sha}/statuses"),
    ],
}

# Keys that only document (or only serve a code generator) and may be dropped.
_DROP = {"examples", "x-exportParamName"}


def _load(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in _DROP}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            out.add(ref)
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def trim(doc: dict[str, Any], operations: list[tuple[str, str]]) -> dict[str, Any]:
    """The header of ``doc``, the operations listed and everything they reference."""
    out: dict[str, Any] = {k: v for k, v in doc.items()
                           if k not in ("paths", "components", "definitions", "parameters", "responses",
                                        "tags", "x-webhooks", "webhooks")}
    paths: dict[str, Any] = {}
    for method, path in operations:
        item = doc["paths"][path]
        entry = paths.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})
        entry[method] = item[method]
    out["paths"] = _strip(paths)
    seen: set[str] = set()
    todo: set[str] = set()
    _refs(out["paths"], todo)
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        node = _strip(_resolve(doc, ref))
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")]
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = node
        _refs(node, todo)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("forge", choices=sorted(OPERATIONS))
    parser.add_argument("full", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", required=True, help="where FULL came from (kept as x-qonnect-source)")
    args = parser.parse_args()
    trimmed = trim(_load(args.full), OPERATIONS[args.forge])
    trimmed["x-qonnect-source"] = args.source
    args.out.write_text(json.dumps(trimmed, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(trimmed['paths'])} paths, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
