"""``qonnect schema [KIND]``: JSON Schemas of the goals files, for editors and CI."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


class _KindHelp(str):
    """The help of KIND, naming the kinds only when the help is printed: they are the keys
    of ``model.schema.KINDS``, whose pydantic models take longer to load than the rest of
    ``qonnect --help`` (which builds this parser too)."""

    def __mod__(self, params: Any) -> str:  # argparse fills in a help text as `help % params`
        from qonnect_gitops.model.schema import KINDS

        return f"one of {', '.join(KINDS)} (case-insensitive)"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "schema",
        help="print the JSON Schema of goals files",
        description="Print the JSON Schema of one goals file kind, or with no KIND one "
        "schema that accepts any goals file (its `kind` selects which).",
    )
    parser.add_argument("kind", nargs="?", help=_KindHelp("one of the goals file kinds (case-insensitive)"))
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from qonnect_gitops.model.schema import KINDS, combined_schema, schema_for

    if args.kind is None:
        document = combined_schema()
    else:
        match = {k.lower(): k for k in KINDS}.get(args.kind.lower())
        if match is None:
            print(f"qonnect schema: unknown kind '{args.kind}'; expected one of "
                  f"{', '.join(KINDS)}", file=sys.stderr)
            return 1
        document = schema_for(match)
    print(json.dumps(document, indent=2, sort_keys=True))
    return 0
