"""The forges a lead is configured for: its own configuration, never the goals'.

``qonnect lead --forges FILE`` (or ``$QONNECT_FORGES``) names a YAML file, typically from a
mounted Secret or ConfigMap, listing each forge a goals repository may select by name
(``spec.review.forge.name``): its dialect, where it is, the repository and where its token
is. Goals choose among these and nothing else, so no goals commit can make a lead read a file
of its choosing or send a token to a server of its choosing.

    forges:
      - name: github
        type: github                 # github | gitlab | gitea (Gitea and Forgejo)
        url: https://github.com      # the web URL; default github.com / gitlab.com; gitea: required
        repository: fleet/goals      # owner/name; GitLab: group/subgroup/project or the project id
        tokenFile: /var/run/secrets/qonnect/forge/token   # else $QONNECT_FORGE_TOKEN
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from qonnect_gitops.model.base import Name, UserModel
from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.fleet import HTTP_URL
from qonnect_gitops.model.yamlpos import parse_yaml, validate_document

MAX_FORGES_FILE_BYTES = 64 * 1024

_REPOSITORY = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$|^[0-9]+$"


class ForgeSettings(UserModel):
    """One forge of the lead's forges file."""

    name: Name = Field(description="What goals select it by: `spec.review.forge.name`.")
    type: Literal["github", "gitlab", "gitea"] = Field(
        description="`github` (github.com or GitHub Enterprise Server), `gitlab`, or `gitea` "
        "(Gitea and Forgejo)."
    )
    url: str | None = Field(
        None, max_length=512, pattern=HTTP_URL,
        description="Base URL of the forge; the API path is added. Default: github.com or gitlab.com; "
        "required for gitea.",
    )
    repository: str = Field(
        max_length=256, pattern=_REPOSITORY,
        description="`owner/name` (GitLab: `group/subgroup/project` or the numeric project id).",
    )
    token_file: Path | None = Field(
        None, description="File holding the API token (a mounted Secret; read again after a 401). "
        "Default: `$QONNECT_FORGE_TOKEN`."
    )

    @model_validator(mode="after")
    def _gitea_needs_url(self) -> ForgeSettings:
        if self.type == "gitea" and self.url is None:
            raise ValueError("a gitea forge needs its url (there is no public default)")
        return self


class ForgesFile(UserModel):
    """The whole forges file."""

    forges: tuple[ForgeSettings, ...] = ()

    @model_validator(mode="after")
    def _unique_names(self) -> ForgesFile:
        names = [f.name for f in self.forges]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"forge '{name}' is listed twice")
        return self


def parse_forges(path: str, raw: bytes) -> tuple[ForgeSettings, ...]:
    """The forges of a forges file's bytes; raises GoalsError naming file, line and field."""
    if len(raw) > MAX_FORGES_FILE_BYTES:
        raise GoalsError([Problem(path, None, None, "", f"is larger than {MAX_FORGES_FILE_BYTES:,} bytes")])
    (doc,) = parse_yaml(path, raw)
    return validate_document(ForgesFile, doc).forges


def load_forges(path: Path) -> tuple[ForgeSettings, ...]:
    """The forges of the file at ``path``; raises GoalsError (unreadable, or invalid)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FORGES_FILE_BYTES + 1)
    except OSError as exc:
        raise GoalsError([Problem(str(path), None, None, "", f"unreadable: {exc.strerror or exc}")]) from None
    return parse_forges(str(path), raw)


def find_forge(forges: tuple[ForgeSettings, ...], name: str) -> ForgeSettings | None:
    """The forge called ``name``, or None."""
    return next((f for f in forges if f.name == name), None)


def unknown_forge(forges: tuple[ForgeSettings, ...], name: str) -> str:
    """Why a goals repository's ``spec.review.forge.name`` finds no forge here."""
    known = ", ".join(f.name for f in forges) or "none (qonnect lead --forges FILE)"
    return f"the goals select forge '{name}' (spec.review.forge.name), but the forges configured here are: {known}"
