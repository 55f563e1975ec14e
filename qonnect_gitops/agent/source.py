"""The agent's source: a narrow fetch of ``cluster/<name>`` and what its head commit says.

Only that one branch is fetched into a local bare cache. The head commit's trailers
carry the plan generation (must never go backwards), the Raft term (recorded for
information), ``Qonnect-Allow-Empty`` and ``Qonnect-Prune-Limit``. Every ``*.yaml``
file holds one object (the render layout); ``sops-*`` files are encrypted and are
skipped and counted, since this agent has no decryption keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import yaml

from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.remote import narrow_fetch
from qonnect_gitops.gitstore.tree import read_tree_files

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


class SourceError(Exception):
    """The branch could not be fetched or read (``BranchUnreadable``)."""


@dataclass(frozen=True)
class Revision:
    """One commit of the cluster branch, parsed."""

    commit: str
    generation: int | None
    term: int | None
    plan: str | None
    allow_empty: bool
    prune_limit: int | None
    objects: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...] = field(default=())


def fetch(cache: Path, url: str, branch: str, credentials: Any = None) -> str:
    """Fetch the branch; returns its head commit id. Raises ``SourceError``."""
    try:
        result = narrow_fetch(cache, url, branch, credentials)
    except Exception as exc:  # RemoteError, GitError, OSError: all mean "unreachable or unreadable"
        raise SourceError(str(exc)) from exc
    assert result.commit is not None
    return result.commit


def read_revision(cache: Path, commit: str) -> Revision:
    """Parse the commit's trailers and manifests. Raises ``SourceError`` on unreadable content."""
    try:
        repo = pygit2.Repository(str(cache))
        obj = repo[commit].peel(pygit2.Commit)
        files = read_tree_files(repo, commit)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise SourceError(f"commit {commit[:12]} unreadable: {exc}") from exc
    found: dict[str, str] = {}
    for key, value in tr.parse_trailers(obj.message):
        found[key] = value
    objects: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in sorted(files):
        base = path.rsplit("/", 1)[-1]
        if not base.endswith((".yaml", ".yml")):
            continue
        if base.startswith("sops-"):
            skipped.append(path)
            continue
        try:
            docs = [d for d in yaml.load_all(files[path], Loader=_Loader) if d is not None]
        except yaml.YAMLError as exc:
            raise SourceError(f"{path}: not valid YAML: {exc}") from exc
        for doc in docs:
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                    or not (doc.get("metadata") or {}).get("name"):
                raise SourceError(f"{path}: not a Kubernetes object (needs apiVersion, kind, metadata.name)")
            objects.append(doc)
    return Revision(
        commit=commit,
        generation=_int(found.get(tr.GENERATION)),
        term=_int(found.get(tr.TERM)),
        plan=found.get(tr.PLAN),
        allow_empty=found.get(tr.ALLOW_EMPTY, "").lower() == "true",
        prune_limit=_int(found.get(tr.PRUNE_LIMIT)),
        objects=tuple(objects),
        skipped=tuple(skipped),
    )


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
