"""The leads reload the tokens file when the kubelet swaps a Secret volume's contents
(a new timestamped directory and an atomic rename of the `..data` symlink)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from qonnect_gitops.lead import tokens as tokens_mod
from qonnect_gitops.lead.tokens import TokenStore, hash_token


def _publish(mount: Path, version: str, text: str) -> None:
    """What the kubelet's atomic writer does for one update of a Secret volume."""
    data = mount / f"..{version}"
    data.mkdir()
    (data / "tokens").write_text(text)
    tmp = mount / "..data_tmp"
    tmp.symlink_to(data.name)
    os.replace(tmp, mount / "..data")
    if not (mount / "tokens").is_symlink():
        (mount / "tokens").symlink_to("..data/tokens")


def test_tokens_reload_after_a_secret_volume_update(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tokens_mod, "RECHECK_SECONDS", 0.0)
    _publish(tmp_path, "2026_11_29_01", f"sha256:{hash_token('qnt_a')} edge-1\n")
    store = TokenStore(tmp_path / "tokens")
    assert store.subject("qnt_a") == "edge-1"
    time.sleep(0.01)
    # Same length on purpose: only the modification time tells the two apart.
    _publish(tmp_path, "2026_11_29_02", f"sha256:{hash_token('qnt_b')} edge-1\n")
    assert store.subject("qnt_b") == "edge-1"
    assert store.subject("qnt_a") is None
