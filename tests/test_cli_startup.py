"""`qonnect --help` and every command's `--help` work, and start without loading what
they do not use (the planner, the simulator, pydantic models, pygit2, the Raft node).

What they cost is measured by benchmarks/cli_startup.py; here, which modules a fresh
interpreter has loaded after building the parsers, which does not depend on the machine.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import textwrap

import pytest

from qonnect_gitops.cli import COMMANDS, main
from tests.conftest import ROOT

# Loaded by none of the parsers: each costs tens of milliseconds or more to import.
HEAVY = ("pydantic", "pygit2", "kubernetes", "numpy", "pysyncobj", "jsonschema",
         "qonnect_gitops.placement", "qonnect_gitops.render", "qonnect_gitops.sim", "qonnect_gitops.kb",
         "qonnect_gitops.gitstore", "qonnect_gitops.forge", "qonnect_gitops.agent", "qonnect_gitops.demo",
         "qonnect_gitops.lead.raft", "qonnect_gitops.lead.service", "qonnect_gitops.model.goals")

PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from qonnect_gitops.cli import COMMANDS, build_parser, main

    def loaded():
        return sorted(sys.modules)

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["token", "--help"])
        except SystemExit:
            pass
    after_one = loaded()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with contextlib.redirect_stdout(io.StringIO()):
        parser.format_help()
        for name in COMMANDS:
            if name != "schema":  # its help lists the goals kinds, read from their models
                sub.choices[name].format_help()
    print(json.dumps({"after_one": after_one, "after_all": loaded()}))
""")


@pytest.fixture(scope="module")
def probe() -> dict[str, list[str]]:
    """The modules a fresh interpreter holds after `qonnect token --help`, then after
    building every parser and formatting every help text but schema's."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=60)
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


# Light modules of heavy packages, made to be read by parsers: the packages export lazily.
LIGHT = frozenset({"qonnect_gitops.forge", "qonnect_gitops.forge.limits"})


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m not in LIGHT and any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.slow  # a fresh interpreter in a subprocess
def test_the_parsers_and_their_help_load_nothing_heavy(probe: dict[str, list[str]]) -> None:
    assert _heavy(probe["after_all"]) == []


@pytest.mark.slow  # a fresh interpreter in a subprocess
def test_a_command_loads_its_own_module_only(probe: dict[str, list[str]]) -> None:
    cli = [m for m in probe["after_one"] if m.startswith("qonnect_gitops.cli.")]
    assert cli == ["qonnect_gitops.cli.token"]


def test_qonnect_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: qonnect ")
    listed = [line.split()[0] for line in out.split("positional arguments:")[1].split("options:")[0].splitlines()[2:]
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == list(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: qonnect {command} ")
    assert "options:" in out


def test_schema_help_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    from qonnect_gitops.model.schema import KINDS

    with pytest.raises(SystemExit):
        main(["schema", "--help"])
    text = " ".join(re.sub(r"-\n\s+", "-", capsys.readouterr().out).split())  # undo the wrapping
    assert f"one of {', '.join(KINDS)} (case-insensitive)" in text


@pytest.mark.parametrize("package", ["qonnect_gitops.model", "qonnect_gitops.lead"])
def test_a_lazy_package_exports_each_name_from_its_module(package: str) -> None:
    module = importlib.import_module(package)
    exports: dict[str, str] = module._EXPORTS
    assert sorted(exports) == sorted(module.__all__)
    for name, where in exports.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{where}"), name)
    with pytest.raises(ImportError):
        exec(f"from {package} import no_such_name", {})
