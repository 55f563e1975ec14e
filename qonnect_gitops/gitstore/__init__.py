"""Git I/O of qonnect: read goals at a commit, write plan and cluster branches, fetch and push.

Works on the object database only (no work tree, no index) through pygit2. Pure
types cross this boundary: paths, bytes, commit ids, ints and strings. See
``docs/git-layout.md`` for the branches and trailers it writes.
"""

from qonnect_gitops.gitstore.errors import (
    FanOutStale,
    GenerationConflict,
    GitStoreError,
    InvalidPath,
    ProposalError,
    ProposalNotFound,
    RemoteError,
    RevisionNotFound,
    StaleProposal,
    StaleRef,
)
from qonnect_gitops.gitstore.store import (
    ClosedProposal,
    GitStore,
    Identity,
    Proposal,
    RefChange,
    WriteResult,
    cas_update_refs,
)
from qonnect_gitops.gitstore.trailers import (
    REASONS,
    DecisionMeta,
    Reason,
    parse_trailers,
)
from qonnect_gitops.gitstore.tree import (
    EMPTY_TREE_HEX,
    build_tree,
    read_file,
    read_tree_files,
    resolve_commit,
)

__all__ = [
    "EMPTY_TREE_HEX",
    "REASONS",
    "ClosedProposal",
    "DecisionMeta",
    "FanOutStale",
    "GenerationConflict",
    "GitStore",
    "GitStoreError",
    "Identity",
    "InvalidPath",
    "Proposal",
    "ProposalError",
    "ProposalNotFound",
    "Reason",
    "RefChange",
    "RemoteError",
    "RevisionNotFound",
    "StaleProposal",
    "StaleRef",
    "WriteResult",
    "build_tree",
    "cas_update_refs",
    "parse_trailers",
    "read_file",
    "read_tree_files",
    "resolve_commit",
]
