"""SSH key pairs for the signing tests, made by ``ssh-keygen`` as an operator makes them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from qonnect_gitops.gitstore.signing import SigningKey


@dataclass(frozen=True)
class KeyPair:
    """A private key file and its public key line."""

    private: Path
    public: str  # "ssh-ed25519 AAAA... comment"

    def signer(self) -> SigningKey:
        return SigningKey.load(self.private)

    def allowed(self, principal: str = "qonnect@localhost", options: str = "") -> str:
        """This key's line of an allowed-signers file."""
        return " ".join(filter(None, [principal, options, self.public]))


def make_key(directory: Path, name: str, kind: str = "ed25519", bits: int | None = None) -> KeyPair:
    """A new unencrypted key pair ``directory/name`` (and ``name.pub``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    size = ["-b", str(bits)] if bits else []
    subprocess.run(["ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C", f"{name}@test", "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return KeyPair(path, Path(f"{path}.pub").read_text().strip())


def allowed_signers(path: Path, *lines: str) -> Path:
    """Write an allowed-signers file (one line per key) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path
