"""Which commits the agent applies: only those signed by a key its own configuration trusts.

The trusted keys come from a file on the agent's side (``--trusted-keys``, a mounted
ConfigMap or Secret), never from the branch: in Git's ``gpg.ssh.allowedSignersFile``
format (``principals [options] keytype base64``) or as plain public key lines, one key a
line (``model.signers``). The head commit of the cluster branch must carry an SSH
signature (``gitstore.signing``) by one of them, or it is refused as a whole before any
file of it is parsed: ``UnsignedCommit`` without a signature, ``UntrustedSigner`` for
one by another key, one that does not match the commit, or one in a form not verified
(OpenPGP, X.509, SSH certificates). Nothing of a refused commit is applied or pruned; the
cluster keeps running what it last applied.

The commit the cluster already runs (the inventory's) is not judged again: trust is
checked when a commit is adopted, so removing a key after the leader moved to a new one
does not stall clusters whose branch has not moved since.

The file is read again when it changes (a stat per pass), so adding or removing a key
needs no restart. A changed file that cannot be used (unreadable, a bad line, no key)
keeps the keys in force, with an error logged: a half-written update must not make the
agent trust nothing, or anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore.signing import SignatureStatus, check_commit, file_stamp
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.signers import AllowedSigner, SignersError, parse_allowed_signers
from qonnect_gitops.model.status import RefusalReason

log = get_logger(__name__)

MAX_FILE_BYTES = 1024 * 1024


class TrustedKeys:
    """The agent's allowed signers, from ``path``; raises ``SignersError`` at start when the
    file cannot be read or holds no key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = file_stamp(self.path)
        self._signers = _read(self.path)

    def signers(self) -> tuple[AllowedSigner, ...]:
        """The keys in force, read again first when the file changed."""
        with self._lock:
            stamp = file_stamp(self.path)
            if stamp is None or stamp == self._stamp:
                return self._signers
            try:
                signers = _read(self.path)
            except SignersError as exc:
                log.error("trusted_keys_unusable", path=str(self.path), error=str(exc), keeps=len(self._signers))
                return self._signers
            self._stamp = stamp
            if signers != self._signers:
                log.info("trusted_keys_reloaded", path=str(self.path), keys=len(signers),
                         fingerprints=",".join(s.key.fingerprint for s in signers))
            self._signers = signers
            return signers


def _read(path: Path) -> tuple[AllowedSigner, ...]:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SignersError(f"{path}: cannot read the trusted keys: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SignersError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignersError(f"{path}: not UTF-8 text") from None
    signers = parse_allowed_signers(text, str(path))
    if not signers:
        raise SignersError(f"{path}: no key (expected allowed-signers lines, e.g. "
                           "'qonnect@localhost ssh-ed25519 AAAAC3Nz...', or public key lines)")
    return signers


@dataclass(frozen=True)
class Untrusted:
    """Why a commit is not applied: the refusal reason and a message naming the commit."""

    reason: RefusalReason
    message: str


def judge(commit: pygit2.Commit, keys: TrustedKeys) -> Untrusted | None:
    """None when ``commit`` is signed by a trusted key, else why not."""
    signers = keys.signers()
    check = check_commit(commit, signers)
    if check.trusted:
        log.debug("commit_trusted", commit=str(commit.id)[:12], signer=check.signer.name if check.signer else "")
        return None
    reason = (RefusalReason.UNSIGNED_COMMIT if check.status is SignatureStatus.UNSIGNED
              else RefusalReason.UNTRUSTED_SIGNER)
    return Untrusted(reason, f"{check.message}; the agent applies only commits signed by one of the "
                     f"{len(signers)} keys in {keys.path}")
