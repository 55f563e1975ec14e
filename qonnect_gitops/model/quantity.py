"""Kubernetes resource quantities (``500m``, ``256Mi``, ``2``), normalised once at load.

CPU becomes whole millicores and memory whole bytes, rounded up as the
Kubernetes API rounds requests. Both serialise back to quantity strings so a
dumped model loads again to the same values.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema

from qonnect_gitops.model.limits import MAX_QUANTITY

_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
QUANTITY_PATTERN = _QUANTITY.pattern


def parse_quantity(value: Any) -> Decimal:
    """Parse a Kubernetes quantity (string or plain number) into a Decimal of base units.

    Raises ValueError with a message naming what was expected.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(
            f"expected a Kubernetes quantity such as '500m', '2' or '256Mi', got {value!r}"
        )
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(
            f"'{text}' is not a Kubernetes quantity; expected a number with an optional "
            "suffix such as '500m', '2', '1.5', '256Mi' or '1G'"
        )
    suffix = match["suffix"] or ""
    # Bound the digits and the exponent before any arithmetic: `1e999999999` must not
    # become a billion-digit integer.
    exponent = int(suffix[1:]) if suffix not in _BINARY and suffix not in _DECIMAL else 0
    if len(match["number"]) > 40 or abs(exponent) > 40:
        raise ValueError(f"'{_short(text)}' is out of range for a Kubernetes quantity")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"'{text}' is not a Kubernetes quantity") from None
    if suffix in _BINARY:
        result = number * _BINARY[suffix]
    elif suffix in _DECIMAL:
        result = number * _DECIMAL[suffix]
    else:  # exponent form, e.g. 1e3
        result = number * (Decimal(10) ** exponent)
    if result < 0:
        raise ValueError(f"'{text}' is negative; expected a quantity of zero or more")
    if result * 1000 > MAX_QUANTITY:
        raise ValueError(f"'{_short(text)}' is out of range for a Kubernetes quantity")
    return result


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def to_millicores(value: Any) -> int:
    """A CPU quantity as whole millicores, rounded up (``0.1`` and ``100m`` are both 100)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def to_bytes(value: Any) -> int:
    """A memory quantity as whole bytes, rounded up."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


def at_most(limit: int, show: Any, what: str) -> AfterValidator:
    """A validator refusing a parsed quantity above ``limit``, shown with ``show``."""

    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"{show(value)} is more than the {what} limit of {show(limit)}")
        return value

    return AfterValidator(check)


def format_millicores(millicores: int) -> str:
    """``1500`` -> ``"1500m"``; whole cores print without a suffix (``2000`` -> ``"2"``)."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_bytes(size: int) -> str:
    """Bytes in the largest binary unit that divides them exactly (``268435456`` -> ``"256Mi"``)."""
    for suffix, factor in reversed(_BINARY.items()):
        if size and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


_QUANTITY_SCHEMA = {
    "anyOf": [
        # The loader refuses negative quantities; so does the schema.
        {"type": "string", "pattern": QUANTITY_PATTERN.replace("[+-]?", "[+]?")},
        {"type": "number", "minimum": 0},
    ],
    "description": "A Kubernetes quantity, e.g. '500m', '2', '256Mi'.",
}

MilliCPU = Annotated[
    int,
    BeforeValidator(to_millicores),
    PlainSerializer(format_millicores, return_type=str),
    WithJsonSchema(_QUANTITY_SCHEMA, mode="validation"),
]
"""A CPU quantity; the model holds whole millicores."""

Bytes = Annotated[
    int,
    BeforeValidator(to_bytes),
    PlainSerializer(format_bytes, return_type=str),
    WithJsonSchema(_QUANTITY_SCHEMA, mode="validation"),
]
"""A memory quantity; the model holds whole bytes."""
