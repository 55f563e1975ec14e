"""`qonnect schema` validates the template with an independent JSON Schema validator."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from qonnect_gitops.cli import main
from tests.conftest import TEMPLATE

GOALS_FILES = sorted(
    [TEMPLATE / "qonnect.yaml", TEMPLATE / "network.yaml"]
    + list(TEMPLATE.glob("clusters/*.yaml"))
    + list(TEMPLATE.glob("apps/*/app.yaml"))
)
KIND_OF = {"qonnect.yaml": "Fleet", "network.yaml": "Network", "app.yaml": "QoSApp"}


def _schema(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["schema", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_combined_schema_accepts_every_template_file(capsys: pytest.CaptureFixture[str]) -> None:
    validator = jsonschema.Draft202012Validator(_schema(capsys))
    jsonschema.Draft202012Validator.check_schema(validator.schema)
    for path in GOALS_FILES:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path}: {errors[0].message}"


@pytest.mark.parametrize("path", GOALS_FILES, ids=lambda p: p.name)
def test_per_kind_schema_accepts_its_file(path, capsys: pytest.CaptureFixture[str]) -> None:
    kind = KIND_OF.get(path.name, "Cluster")
    jsonschema.validate(yaml.safe_load(path.read_text()), _schema(capsys, kind.lower()))


def test_schema_rejects_what_the_loader_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    schema = _schema(capsys, "Cluster")
    cluster = yaml.safe_load((TEMPLATE / "clusters" / "edge-1.yaml").read_text())
    cluster["spec"]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.validate(cluster, schema)
    cluster["spec"].pop("colour")
    cluster["spec"]["nodes"][0]["cpu"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cluster, schema)


def test_unknown_kind_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "Widget"]) == 1
    assert "unknown kind 'Widget'" in capsys.readouterr().err
