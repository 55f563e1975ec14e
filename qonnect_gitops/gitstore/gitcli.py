"""The mirror's fetches and pushes through the ``git`` command line.

Fetch: libgit2 offers the remote every local ref as common ground, so with one branch
per cluster a fetch that brings anything new is slow: at 10,000 branches, after one
goals commit, 3-10 s (17 s under load) where ``git fetch`` took 0.3-0.45 s, whole
or for the moved refs alone (protocol v2 names them). With nothing new both take
about 0.4 s. libgit2 fetches only where the command line cannot.

Push: a push gets the remote's whole ref advertisement (push has no protocol
v2), and both ends walk every advertised commit the pusher also has. With one branch
per cluster that walk is the cost of a push: at 10,000 branches libgit2 took 0.7-1.3 s
to push one ref to a local repository where ``git push`` took 0.2-0.3 s, git reading
commits through the commit-graph file the mirror keeps (``Mirror`` upkeep). A decision
that changed one cluster, written and pushed: 0.9 s against 2.6 s (``benchmarks/fleet.py
--clusters 10000`` and ``--libgit2``).

Compare-and-swap: ``--force-with-lease=<ref>:<value>`` names the value the remote must
still hold (empty: the ref must not exist), the same CAS the libgit2 path checks by hand.
A big atomic push (a fan-out) is checked instead by a pre-push hook against the values
last seen (``push_checked``): git writes a remote-tracking ref file per pushed branch
after a push to a named remote (at 3,000 branches 1-4 s on our machines, as long as
the server's own ref updates), and explicit leases cost it a scan of every lease per ref.

Refspecs: explicit ones cost ``git push`` a scan of every local ref each, so a push of
many branches names them with one pattern (``refs/heads/cluster/*``) instead: every
local branch under it that differs from the remote's is pushed. Such a push is leased
by ``--force-with-lease`` with no value, which takes for every ref the remote-tracking
ref of the named remote: the mirror's tracking refs are exactly what it last saw. (A
lease looked up per advertised ref costs a little more, so few refs get explicit ones.)

What the remote did with each ref is read from ``--porcelain`` lines by their flag
field, never from message wording.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from qonnect_gitops.logs import redact

TIMEOUT_SECONDS = 600.0
EXPLICIT_REFSPECS_MAX = 64  # beyond this, branches under a pattern are pushed by the pattern
_ACCEPTED_FLAGS = frozenset(" +-*=")  # fast-forward, forced, deleted, new, already there
_REJECTED_FLAG = "!"


class Unavailable(Exception):
    """The command line cannot be used here (no ``git`` binary, or credentials it cannot be
    handed safely, such as SSH keys): use libgit2 instead."""


class GitFailed(Exception):
    """``git push`` or ``git fetch`` failed as a whole (connection, authentication,
    protocol): for a push no ref was reported, so nothing can be assumed about any."""


@dataclass(frozen=True)
class PushOutcome:
    """Per ref, what the remote answered: accepted (including "already there") or
    rejected with the porcelain summary as the reason."""

    accepted: frozenset[str]
    rejected: dict[str, str] = field(default_factory=dict)


MIN_VERSION = (2, 31)  # GIT_CONFIG_COUNT (2.31), fetch --no-write-fetch-head (2.29)


def available(credentials: Any) -> bool:
    """Whether ``push`` and ``fetch`` can run with these credentials on this machine."""
    return (credentials is None or isinstance(credentials, pygit2.UserPass)) and git_version() >= MIN_VERSION


@functools.cache
def git_version() -> tuple[int, ...]:
    """The installed git's version, ``()`` without one (or one that does not say)."""
    if shutil.which("git") is None:
        return ()
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    match = re.match(r"git version (\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else ()


def refspecs(updates: Sequence[tuple[str, bool]], pattern_prefixes: Sequence[str] = ()) -> list[str]:
    """Refspecs for ``(ref, deleted)`` updates: explicit ones while there are few; when
    many, one ``<prefix>*`` pattern covers every non-deleted ref under a prefix."""
    if len(updates) <= EXPLICIT_REFSPECS_MAX:
        return [f":{ref}" if deleted else f"{ref}:{ref}" for ref, deleted in updates]
    out: list[str] = []
    patterns: set[str] = set()
    for ref, deleted in updates:
        prefix = next((p for p in pattern_prefixes if ref.startswith(p)), None)
        if deleted:
            out.append(f":{ref}")
        elif prefix is not None:
            patterns.add(prefix)
        else:
            out.append(f"{ref}:{ref}")
    return [f"{p}*:{p}*" for p in sorted(patterns)] + out


def push(repo: Path, remote: str, specs: Sequence[str], leases: Mapping[str, str | None] | None,
         credentials: Any = None, timeout: float = TIMEOUT_SECONDS, *, atomic: bool = False) -> PushOutcome:
    """``git push --porcelain <leases> <remote> <specs>`` in the bare ``repo``.

    ``leases`` maps each ref to the commit the remote must hold (None: no such ref);
    None leases every ref on its remote-tracking ref. ``atomic``: the remote updates every
    ref or none (``--atomic``; a remote that cannot fails the whole push). Raises
    ``Unavailable`` (see ``available``) and ``GitFailed`` when the push as a whole failed."""
    _check(credentials)
    lease_args = ["--force-with-lease"] if leases is None else [
        f"--force-with-lease={ref}:{old or ''}" for ref, old in leases.items()]
    command = ["git", "-C", str(repo), "-c", "credential.helper=", "-c", "core.askPass=",
               "push", "--porcelain", "--no-verify", *(["--atomic"] if atomic else []),
               *lease_args, "--", remote, *specs]
    proc = _run(command, "push", credentials, timeout)
    outcome = parse_porcelain(proc.stdout)
    if proc.returncode != 0 and not outcome.accepted and not outcome.rejected:
        raise GitFailed(redact(proc.stderr.strip() or f"git push exited {proc.returncode}"))
    return outcome


# The pre-push hook of ``push_checked``: refuses the push unless the remote holds, for
# every ref about to move, the value the mirror expects (argv: the expected values, one
# "<ref> <id or ->" a line, and the file naming the refs that differ).
_CHECK = """import sys
expected = {}
with open(sys.argv[1]) as fh:
    for line in fh:
        ref, _, oid = line.rstrip("\\n").partition(" ")
        expected[ref] = oid
stale = []
for line in sys.stdin:
    parts = line.split()
    if len(parts) == 4:
        have = "-" if not parts[3].strip("0") else parts[3]
        if expected.get(parts[2]) != have:
            stale.append(parts[2] + " " + have + " " + expected.get(parts[2], "?"))
if stale:
    with open(sys.argv[2], "w") as fh:
        fh.write("\\n".join(stale) + "\\n")
    sys.exit(1)
"""


_PUSH_REMOTE = "qonnect-checked-push"


def push_checked(repo: Path, url: str, specs: Sequence[str], expected: Mapping[str, str | None],
                 credentials: Any = None, timeout: float = TIMEOUT_SECONDS) -> PushOutcome:
    """One atomic ``git push --porcelain --atomic <url> +<specs>`` in the bare ``repo``, refused
    as a whole unless the remote holds ``expected`` (ref -> id, None: no such ref) for every
    ref it would move; a ref the push would move that ``expected`` does not name is refused
    too. The rejected refs come back in ``PushOutcome.rejected``, with nothing pushed.

    The same compare-and-swap as ``--force-with-lease``, checked by a pre-push hook against
    the values the remote advertised (which receive-pack then requires under its lock),
    without its costs at fleet scale: no remote-tracking ref is written (git writes one file
    per pushed ref; the caller records what landed in one batch), and no lease is matched
    per ref (explicit leases cost git a scan of all of them per ref). Raises
    ``Unavailable`` (also when the hook could not run here) and ``GitFailed``."""
    _check(credentials)
    with tempfile.TemporaryDirectory(prefix="qonnect-push-") as tmp:
        hooks = Path(tmp)
        (hooks / "check.py").write_text(_CHECK)
        (hooks / "expected").write_text("".join(f"{ref} {old or '-'}\n" for ref, old in expected.items()))
        hook = hooks / "pre-push"
        hook.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I {shlex.quote(str(hooks / 'check.py'))} "
                        f"{shlex.quote(str(hooks / 'expected'))} {shlex.quote(str(hooks / 'stale'))}\n")
        hook.chmod(0o700)
        if not os.access(hook, os.X_OK):
            # git skips a hook it cannot execute (a noexec /tmp) and would push unchecked.
            raise Unavailable(f"a pre-push hook cannot run from {tmp}")
        forced = [spec if spec.startswith((":", "+")) else f"+{spec}" for spec in specs]
        # The URL reaches git as a remote defined in the environment (it may carry
        # credentials); the remote has no fetch refspecs, so no tracking ref is written.
        command = ["git", "-C", str(repo), "-c", "credential.helper=", "-c", "core.askPass=",
                   "-c", f"core.hooksPath={hooks}", "push", "--porcelain", "--atomic", "--", _PUSH_REMOTE, *forced]
        proc = _run(command, "push", credentials, timeout, {f"remote.{_PUSH_REMOTE}.url": url})
        stale_file = hooks / "stale"
        if stale_file.exists():
            rejected = {}
            for line in stale_file.read_text().splitlines():
                ref, have, want = line.split(" ")
                rejected[ref] = f"stale info: remote holds {have[:12]}, we last saw {want[:12]}"
            return PushOutcome(frozenset(), rejected)
    outcome = parse_porcelain(proc.stdout)
    if proc.returncode != 0 and not outcome.accepted and not outcome.rejected:
        raise GitFailed(redact(proc.stderr.strip() or f"git push exited {proc.returncode}"))
    return outcome


def fetch(repo: Path, remote: str, specs: Sequence[str], credentials: Any = None,
          timeout: float = TIMEOUT_SECONDS) -> None:
    """``git fetch --prune <remote> <specs>`` in the bare ``repo``: the refs the refspecs
    name, tracking refs under their patterns pruned; no FETCH_HEAD, tags or gc. Raises
    ``Unavailable`` and ``GitFailed``."""
    _check(credentials)
    command = ["git", "-C", str(repo), "-c", "credential.helper=", "-c", "core.askPass=",
               "fetch", "--quiet", "--prune", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
               "--", remote, *specs]  # "--": a remote never reads as an option (--upload-pack=...)
    proc = _run(command, "fetch", credentials, timeout)
    if proc.returncode != 0:
        raise GitFailed(redact(proc.stderr.strip() or f"git fetch exited {proc.returncode}"))


def _check(credentials: Any) -> None:
    if not available(credentials):
        raise Unavailable(f"git {'.'.join(map(str, git_version())) or 'missing'} (needs "
                          f"{'.'.join(map(str, MIN_VERSION))}) or credentials of type {type(credentials).__name__}")


def _run(command: list[str], verb: str, credentials: Any, timeout: float,
         config: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, env=_environment(credentials, config),
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(f"git {verb} timed out after {timeout:g} s") from exc
    except OSError as exc:  # git went away since ``available`` said yes
        raise GitFailed(f"git could not run: {exc}") from exc


def parse_porcelain(stdout: str) -> PushOutcome:
    """The per-ref lines of ``git push --porcelain``: ``<flag>\\t<from>:<to>\\t<summary>``."""
    accepted: set[str] = set()
    rejected: dict[str, str] = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1 or ":" not in parts[1]:
            continue  # "To <url>", "Done"
        flag, ref, summary = parts[0], parts[1].rpartition(":")[2], parts[2]
        if flag in _ACCEPTED_FLAGS:
            accepted.add(ref)
        elif flag == _REJECTED_FLAG:
            rejected[ref] = summary
    return PushOutcome(frozenset(accepted), rejected)


def _environment(credentials: Any, config: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: never prompt; a user and token as a basic-auth header, and
    ``config`` (which may hold a URL with credentials in it), passed through the environment
    (``/proc/<pid>/environ`` is private to the user, the command line is not)."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    pairs = dict(config or {})
    if isinstance(credentials, pygit2.UserPass):
        user, token = credentials.credential_tuple
        basic = base64.b64encode(f"{user}:{token}".encode()).decode()
        pairs["http.extraHeader"] = f"Authorization: Basic {basic}"
    if pairs:
        env["GIT_CONFIG_COUNT"] = str(len(pairs))
        for i, (key, value) in enumerate(pairs.items()):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env
