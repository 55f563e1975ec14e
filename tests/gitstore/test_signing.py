"""Signed decisions: our SSH commit signatures and Git's are one format, checked both ways
with plain ``git verify-commit`` and ``ssh-keygen``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import DecisionMeta, GitStore
from qonnect_gitops.gitstore.signing import (
    BadSignature,
    KeyFile,
    SignatureStatus,
    SigningError,
    SigningKey,
    add_signature,
    check_commit,
    verify_signature,
)
from qonnect_gitops.model.signers import SignersError, parse_allowed_signers, parse_public_key
from tests.signing_keys import KeyPair, allowed_signers, make_key

from .helpers import GIT_ENV, git, plan_files

SRC = "1" * 40


def meta(gen: int) -> DecisionMeta:
    return DecisionMeta(source=SRC, term=1, generation=gen, reason="goals-changed")


def decide(store: GitStore, gen: int, tag: str = "v1") -> None:
    store.write_decision(plan_files(3, tag=tag), summary=f"Decision {gen}", body="why", meta=meta(gen),
                         clusters=["c0", "c1", "c2"], timestamp=1_700_000_000 + gen)


def verify_commit(repo: Path, rev: str, signers: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), "-c", f"gpg.ssh.allowedSignersFile={signers}",
                           "verify-commit", rev], env=GIT_ENV, capture_output=True, text=True, check=False)


def git_signed_commit(tmp_path: Path, key: KeyPair, name: str = "work") -> tuple[pygit2.Commit, Path]:
    """A commit ``git commit -S`` signs with ``key`` (gpg.format=ssh)."""
    work = tmp_path / name
    git("init", "-q", "-b", "main", work)
    (work / "qonnect.yaml").write_text("kind: Fleet\n")
    git("add", "-A", cwd=work)
    git("-c", "gpg.format=ssh", "-c", f"user.signingkey={key.private}", "commit", "-q", "-S", "-m", "goals",
        cwd=work)
    repo = pygit2.Repository(str(work))
    return repo.head.peel(pygit2.Commit), work


@pytest.fixture
def lead_key(tmp_path: Path) -> KeyPair:
    return make_key(tmp_path / "keys", "lead")


def test_every_commit_the_store_writes_verifies_with_git(tmp_path: Path, lead_key: KeyPair) -> None:
    store = GitStore.init_bare(tmp_path / "r.git", signer=lead_key.signer())
    decide(store, 1)
    proposal = store.propose("p1", plan_files(3, tag="v2"), summary="Proposal", description="moves",
                             meta=meta(2), clusters=["c0", "c1", "c2"], timestamp=1_700_000_100)
    assert proposal is not None
    signers = allowed_signers(tmp_path / "allowed", lead_key.allowed())
    repo = tmp_path / "r.git"
    revs = ["qonnect/plan", "cluster/c0", "cluster/c1", "cluster/c2", "qonnect/proposals/p1"]
    for rev in revs:
        run = verify_commit(repo, rev, signers)
        assert run.returncode == 0, (rev, run.stderr)
        assert 'Good "git" signature for qonnect@localhost' in run.stderr
    # ... and the approval's fan-out (its cluster commits are written by approve) too
    store.approve("p1", timestamp=1_700_000_200)
    for rev in ["cluster/c0", "cluster/c1", "cluster/c2"]:
        assert verify_commit(repo, rev, signers).returncode == 0
    # A key git does not trust: git refuses, exactly as our check does.
    other = make_key(tmp_path / "keys", "other")
    wrong = allowed_signers(tmp_path / "wrong", other.allowed())
    assert verify_commit(repo, "cluster/c0", wrong).returncode != 0
    commit = store.repo.revparse_single("cluster/c0").peel(pygit2.Commit)
    assert check_commit(commit, parse_allowed_signers(wrong.read_text())).status is SignatureStatus.UNTRUSTED
    assert check_commit(commit, parse_allowed_signers(signers.read_text())).trusted


def test_signed_commits_are_reproducible(tmp_path: Path, lead_key: KeyPair) -> None:
    """Ed25519 signs deterministically: the same decision gives the same commit ids."""
    heads = []
    for name in ("a.git", "b.git"):
        store = GitStore.init_bare(tmp_path / name, signer=lead_key.signer())
        decide(store, 1)
        heads.append((store.plan_head(), store.cluster_head("c1")))
    assert heads[0] == heads[1]
    unsigned = GitStore.init_bare(tmp_path / "u.git")
    decide(unsigned, 1)
    assert unsigned.plan_head() != heads[0][0]


def test_our_signature_is_byte_for_byte_ssh_keygen_s(tmp_path: Path, lead_key: KeyPair) -> None:
    message = tmp_path / "message"
    message.write_bytes(b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nhello\n")
    subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(lead_key.private), str(message)],
                   check=True, capture_output=True)
    theirs = Path(f"{message}.sig").read_text()
    assert lead_key.signer().sign(message.read_bytes()) == theirs
    # and ssh-keygen verifies what we sign (here for an RSA key, whose output is ours alone)
    rsa = make_key(tmp_path / "keys", "rsa", "rsa", 2048)
    Path(f"{message}.sig").write_text(rsa.signer().sign(message.read_bytes()))
    signers = allowed_signers(tmp_path / "allowed", rsa.allowed("op@example.org"))
    with message.open("rb") as data:
        run = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "op@example.org", "-n", "git",
                              "-s", f"{message}.sig"], stdin=data, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(("kind", "bits"), [("ed25519", None), ("ecdsa", 256), ("ecdsa", 384), ("ecdsa", 521),
                                            ("rsa", 2048)])
def test_commits_git_signs_verify_with_our_code(tmp_path: Path, kind: str, bits: int | None) -> None:
    key = make_key(tmp_path / "keys", "author", kind, bits)
    commit, _ = git_signed_commit(tmp_path, key)
    trusted = parse_allowed_signers(key.allowed("alice@example.org"))
    check = check_commit(commit, trusted)
    assert check.trusted, check.message
    assert check.signer is not None and check.signer.name == "alice@example.org"
    other = parse_allowed_signers(make_key(tmp_path / "keys", "other").public)
    assert check_commit(commit, other).status is SignatureStatus.UNTRUSTED


def test_unsigned_altered_and_foreign_signatures(tmp_path: Path, lead_key: KeyPair) -> None:
    trusted = parse_allowed_signers(lead_key.public)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    sig = pygit2.Signature("x", "x@example.org", 1_700_000_000, 0)
    tree = repo.TreeBuilder().write()
    unsigned = repo[repo.create_commit(None, sig, sig, "plain\n", tree, [])]
    check = check_commit(unsigned, trusted)
    assert check.status is SignatureStatus.UNSIGNED and str(unsigned.id)[:12] in check.message

    content = repo.odb.read(unsigned.id)[1]
    signed = lead_key.signer().sign_commit(content)
    good = repo[repo.odb.write(pygit2.enums.ObjectType.COMMIT, signed)]
    assert check_commit(good, trusted).trusted
    # The signature kept, the message changed: the signature no longer matches.
    altered = repo[repo.odb.write(pygit2.enums.ObjectType.COMMIT, signed.replace(b"plain", b"plane"))]
    check = check_commit(altered, trusted)
    assert check.status is SignatureStatus.UNTRUSTED and "does not match" in check.message
    # An OpenPGP signature is not checked: not trusted, and said so.
    pgp = add_signature(content, "-----BEGIN PGP SIGNATURE-----\n\nwsBcBAABCAAQ\n-----END PGP SIGNATURE-----\n")
    check = check_commit(repo[repo.odb.write(pygit2.enums.ObjectType.COMMIT, pgp)], trusted)
    assert check.status is SignatureStatus.UNTRUSTED and "OpenPGP" in check.message
    # Another namespace (an ssh-keygen "file" signature of the same bytes) is not a commit signature.
    other_ns = add_signature(content, lead_key.signer().sign(content, namespace="file"))
    check = check_commit(repo[repo.odb.write(pygit2.enums.ObjectType.COMMIT, other_ns)], trusted)
    assert check.status is SignatureStatus.UNTRUSTED and "namespace" in check.message
    with pytest.raises(BadSignature):
        verify_signature("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n", content)


def test_allowed_signers_limits_as_ssh_keygen_reads_them(tmp_path: Path, lead_key: KeyPair) -> None:
    commit, _ = git_signed_commit(tmp_path, lead_key)
    when = commit.committer.time
    only_file = parse_allowed_signers(lead_key.allowed("a@x", 'namespaces="file"'))
    assert "namespaces" in check_commit(commit, only_file).message
    expired = parse_allowed_signers(lead_key.allowed("a@x", 'valid-before="20200101Z"'))
    assert check_commit(commit, expired).status is SignatureStatus.UNTRUSTED
    current = parse_allowed_signers(lead_key.allowed("a@x", 'namespaces="git,file",valid-after="20200101Z"'))
    assert check_commit(commit, current).trusted
    assert when > 1_577_836_800


@pytest.mark.parametrize(("line", "expected"), [
    ("a@x ssh-dss AAAAB3NzaC1kc3M= x", "not supported"),
    ("a@x cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK23WWfVsOmn6055u9W7OJ4gXA+ywpwb4FRdodg4EI4w",
     "cert-authority"),
    ('a@x valid-before="20300101" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK23WWfVsOmn6055u9W7OJ4gXA+ywpwb4FRdodg4EI4w',
     "time zone"),
    ("a@x ssh-ed25519 AAAA!!", "base64"),
    ("a@x ssh-ed25519 AAAAB3NzaC1yc2EAAAABAwAAAAEF", "not an ssh-ed25519 key"),  # an RSA blob
    ('a@x nope="1" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK23WWfVsOmn6055u9W7OJ4gXA+ywpwb4FRdodg4EI4w', "unknown option"),
])
def test_unusable_lines_are_refused_with_file_and_line(line: str, expected: str) -> None:
    with pytest.raises(SignersError, match=expected) as err:
        parse_allowed_signers(f"# trusted keys\n\n{line}\n", "/etc/qonnect/allowed_signers")
    assert str(err.value).startswith("/etc/qonnect/allowed_signers:3:")


def test_plain_public_keys_and_fingerprints(lead_key: KeyPair) -> None:
    (signer,) = parse_allowed_signers(lead_key.public)
    assert signer.principals == () and signer.key.comment == "lead@test"
    printed = subprocess.run(["ssh-keygen", "-l", "-f", f"{lead_key.private}.pub"], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert signer.key.fingerprint == printed == parse_public_key(lead_key.public).fingerprint


def test_signing_keys_qonnect_refuses(tmp_path: Path) -> None:
    with pytest.raises(SigningError, match="Ed25519"):
        make_key(tmp_path, "ec", "ecdsa", 256).signer()
    with pytest.raises(SigningError, match="2048"):
        make_key(tmp_path, "small", "rsa", 1024).signer()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(tmp_path / "locked")],
                   check=True, capture_output=True)
    with pytest.raises(SigningError, match="passphrase"):
        SigningKey.load(tmp_path / "locked")
    with pytest.raises(SigningError, match="cannot read"):
        SigningKey.load(tmp_path / "missing")


def test_key_file_is_read_again_when_replaced(tmp_path: Path) -> None:
    first = make_key(tmp_path / "a", "lead")
    second = make_key(tmp_path / "b", "lead")
    mounted = tmp_path / "signing-key"
    mounted.write_bytes(first.private.read_bytes())
    keys = KeyFile(mounted)
    assert keys.public.blob == parse_public_key(first.public).blob
    mounted.write_text("not a key\n")  # a half-written update keeps the key in use
    os.utime(mounted, ns=(1, 1))
    keys._checked = -1e9
    assert keys.public.blob == parse_public_key(first.public).blob
    mounted.write_bytes(second.private.read_bytes())
    keys._checked = -1e9
    assert keys.public.blob == parse_public_key(second.public).blob
