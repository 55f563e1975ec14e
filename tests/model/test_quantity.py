"""Kubernetes quantities are normalised once, as the API server would round them."""

from __future__ import annotations

import pytest

from qonnect_gitops.model.quantity import format_bytes, format_millicores, to_bytes, to_millicores


@pytest.mark.parametrize(
    ("text", "millicores"),
    [("500m", 500), ("2", 2000), (2, 2000), (0.1, 100), ("1.5", 1500), ("250u", 1), ("1k", 1_000_000), ("0", 0)],
)
def test_cpu(text: object, millicores: int) -> None:
    assert to_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "size"),
    [("256Mi", 256 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("128974848", 128974848), ("1e3", 1000), ("0.5Ki", 512)],
)
def test_memory(text: object, size: int) -> None:
    assert to_bytes(text) == size


@pytest.mark.parametrize("bad", ["", "2 cores", "1.2.3", "Mi", "-1", True, None, [1]])
def test_rejects_what_kubernetes_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        to_millicores(bad)


def test_round_trip_through_the_serialised_form() -> None:
    for millicores in (1, 500, 1000, 1500, 64000):
        assert to_millicores(format_millicores(millicores)) == millicores
    for size in (1, 512, 2**20, 3 * 2**30, 10**9):
        assert to_bytes(format_bytes(size)) == size
