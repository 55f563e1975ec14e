"""The complexity ratchet (scripts/complexity.py): a baseline that may only shrink.

Each test writes a small package into a temporary checkout and runs the script's
check, ``--update`` and ``--add`` against a baseline file there.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("complexity_ratchet", ROOT / "scripts" / "complexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


ratchet = _load()


def branchy(name: str, branches: int) -> str:
    """A function of complexity ``branches + 1``."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches))
    return f"def {name}(x):\n{body}    return -1\n"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "qonnect_gitops").mkdir()
    (tmp_path / "scripts").mkdir()
    monkeypatch.setattr(ratchet, "ROOT", tmp_path)
    monkeypatch.setattr(ratchet, "BASELINE", tmp_path / "scripts" / "complexity-baseline.txt")
    return tmp_path


def write(checkout: Path, source: str, name: str = "mod.py") -> None:
    (checkout / "qonnect_gitops" / name).write_text(source)


def baseline(checkout: Path) -> dict[str, int]:
    return ratchet.read_baseline(checkout / "scripts" / "complexity-baseline.txt")


def test_a_new_function_over_the_threshold_fails_and_add_records_it(checkout: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    write(checkout, branchy("simple", 3) + branchy("tangled", 14))
    assert ratchet.main([]) == 1
    err = capsys.readouterr().err
    assert "qonnect_gitops/mod.py:9: tangled: complexity 15, over 10 and not in the baseline" in err
    assert "--add" in err and "simple" not in err
    assert ratchet.main(["--add", "qonnect_gitops/mod.py::tangled"]) == 0
    assert baseline(checkout) == {"qonnect_gitops/mod.py::tangled": 15}


def test_a_listed_function_that_grew_fails_and_update_does_not_raise_it(checkout: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    write(checkout, branchy("tangled", 14))
    ratchet.main(["--add", "qonnect_gitops"])
    write(checkout, branchy("tangled", 16))
    assert ratchet.main(["--update"]) == 1
    assert "tangled: complexity 17, above its baseline 15" in capsys.readouterr().err
    assert baseline(checkout) == {"qonnect_gitops/mod.py::tangled": 15}


def test_an_improved_function_fails_until_update_lowers_its_entry(checkout: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write(checkout, branchy("tangled", 20) + branchy("knotted", 12) + branchy("gone", 11))
    ratchet.main(["--add", "qonnect_gitops/mod.py"])
    write(checkout, branchy("tangled", 15) + branchy("knotted", 5))
    assert ratchet.main([]) == 1
    err = capsys.readouterr().err
    assert "tangled: baseline 21, now 16" in err
    assert "knotted: baseline 13, now 6, within 10" in err
    assert "qonnect_gitops/mod.py::gone: in the baseline, no longer in the code" in err
    assert "--update" in err
    assert ratchet.main(["--update"]) == 0
    assert baseline(checkout) == {"qonnect_gitops/mod.py::tangled": 16}
    assert ratchet.main([]) == 0


def test_methods_nested_functions_and_redefinitions_have_keys_of_their_own(checkout: Path) -> None:
    nested = textwrap.indent(branchy("inner", 11), " " * 8)
    write(checkout, "class Box:\n"
                    "    @property\n    def size(self):\n        return 1\n"
                    "    @size.setter\n    def size(self, value):\n        pass\n"
                    f"    def method(self):\n{nested}        return inner\n")
    measured = ratchet.measure()
    assert set(measured) == {"qonnect_gitops/mod.py::Box.size", "qonnect_gitops/mod.py::Box.size#2",
                             "qonnect_gitops/mod.py::Box.method", "qonnect_gitops/mod.py::Box.method.inner"}
    assert measured["qonnect_gitops/mod.py::Box.method.inner"].complexity == 12


def test_add_refuses_a_name_that_matches_nothing(checkout: Path) -> None:
    write(checkout, branchy("tangled", 14))
    with pytest.raises(SystemExit, match="names no function"):
        ratchet.main(["--add", "qonnect_gitops/mod.py::tangle"])


def test_a_malformed_baseline_line_is_an_error_naming_it(checkout: Path) -> None:
    (checkout / "scripts" / "complexity-baseline.txt").write_text("# header\nqonnect_gitops/mod.py::f twelve\n")
    with pytest.raises(SystemExit, match=r"complexity-baseline.txt:2: expected"):
        ratchet.read_baseline()
