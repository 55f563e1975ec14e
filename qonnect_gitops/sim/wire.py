"""Protobuf request and response bodies (``application/vnd.kubernetes.protobuf``) for built-in kinds.

Go clients (kubectl's imperative commands, controllers built on client-go) send and
ask for protobuf. A body is the magic ``k8s\\x00`` followed by a ``runtime.Unknown``
whose ``typeMeta`` names the kind and whose ``raw`` is the kind's message; a watch
stream is a sequence of frames, each a 4-byte big-endian length and such an envelope
holding a ``WatchEvent``.

The messages are the upstream ``generated.proto`` definitions, shipped as data in
``qonnect_gitops/data/kubernetes-proto`` (source and licence in its README) and
compiled here, once per process, into field tables: no generated code. Decoding
yields the same JSON-shaped object the JSON path would have parsed, and encoding
starts from the stored object, so both paths share everything after the parse. The
Kubernetes JSON mapping differs from the standard proto3 one, so it is spelled out:
times as RFC 3339 strings, quantities and int-or-strings as JSON scalars, raw
extensions and ``fieldsV1`` as embedded JSON, ``bytes`` as base64, single-list
wrappers (``Verbs``, ``ExtraValue``) as arrays, and the JSON-schema names of
``JSONSchemaProps`` (``$ref``, ``x-kubernetes-*``).

Go marshals every non-pointer field, zero or not, so a decoded body carries zero
values the JSON encoding would have omitted. Empty strings and zero times are
dropped (no API field distinguishes them from absence, except a claim's
``storageClassName``); zero numbers and false booleans are kept, except for a few
fields whose zero is their default, because a kept zero is always what the client
meant (``replicas: 0``) and a dropped one might not be.
"""

from __future__ import annotations

import base64
import calendar
import json
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from qonnect_gitops.sim import errors, schema
from qonnect_gitops.sim.resources import ResourceType

PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_STREAM = "application/vnd.kubernetes.protobuf;stream=watch"
MAGIC = b"k8s\x00"

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
RUNTIME = "k8s.io.apimachinery.pkg.runtime."
TIME, MICRO_TIME, DURATION = META + "Time", META + "MicroTime", META + "Duration"
FIELDS_V1 = META + "FieldsV1"
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = RUNTIME + "RawExtension"
UNKNOWN = RUNTIME + "Unknown"
WATCH_EVENT = META + "WatchEvent"
JSON_SCHEMA = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1."
RAW_JSON = {FIELDS_V1, RAW_EXTENSION, JSON_SCHEMA + "JSON"}

# Fields whose empty string means something (no storage class at all), kept when decoding.
KEEP_EMPTY_STRINGS = frozenset({"storageClassName"})
# Non-pointer fields whose zero is their default: dropped when decoding, as Go's JSON omits them.
DROP_ZERO = frozenset({"stdin", "stdinOnce", "tty", "hostNetwork", "hostPID", "hostIPC", "minReadySeconds",
                       "paused", "generation", "readOnly", "globalDefault", "publishNotReadyAddresses"})

_SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
            "sfixed32", "sfixed64", "bool", "string", "bytes"}
_VARINT = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool"}


@dataclass
class Field:
    """One field of a message."""

    name: str
    number: int
    type: str  # a scalar type or a message's full name
    repeated: bool = False
    map_key: str | None = None  # map<key, type>
    inline: bool = False  # a Go struct embedded with json:",inline": its fields sit in the parent's JSON


@dataclass
class Message:
    """A message's fields by number and by JSON name."""

    name: str
    by_number: dict[int, Field] = field(default_factory=dict)
    by_json: dict[str, Field] = field(default_factory=dict)

    @property
    def wrapper(self) -> bool:
        """A single repeated ``items`` field that JSON shows as a bare array (``Verbs``, ``ExtraValue``)."""
        return len(self.by_number) == 1 and 1 in self.by_number and self.by_number[1].name == "items" \
            and self.by_number[1].repeated and self.by_number[1].type in _SCALARS


# --------------------------------------------------------------------------- the .proto compiler

_TOKEN = re.compile(r'"[^"]*"|[A-Za-z_.][A-Za-z0-9_.]*|\d+|[{}<>;=,\[\]()]')
_DATA = "kubernetes-proto"


def _proto_root() -> Path:
    return Path(str(resources.files("qonnect_gitops") / "data" / _DATA))


def _json_name(message: str, name: str) -> str:
    if message.startswith(JSON_SCHEMA + "JSONSchemaProps"):
        if name in ("ref", "schema"):
            return "$" + name
        if name.startswith("xKubernetes"):
            return "x-kubernetes-" + re.sub(r"(?<!^)([A-Z])", r"-\1", name[len("xKubernetes"):]).lower()
    return name


def compile_protos(root: Path) -> dict[str, Message]:
    """Every message of the ``generated.proto`` files under ``root``, by full name."""
    messages: dict[str, Message] = {}
    pending: list[tuple[str, Message, list[tuple[str, str, int, bool, str | None]]]] = []
    for path in sorted(root.rglob("*.proto")):
        text = re.sub(r"/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
        text = re.sub(r"//[^\n]*", "", text)
        tokens = _TOKEN.findall(text)
        package, i = "", 0
        while i < len(tokens):
            tok = tokens[i]
            if tok == "package":
                package, i = tokens[i + 1], i + 3
            elif tok in ("syntax", "import", "option"):
                while tokens[i] != ";":
                    i += 1
                i += 1
            elif tok == "message":
                msg = Message(f"{package}.{tokens[i + 1]}")
                i += 3
                fields: list[tuple[str, str, int, bool, str | None]] = []
                while tokens[i] != "}":
                    if tokens[i] == "map":  # map < K , V > name = N ;
                        key, value, fname, number = tokens[i + 2], tokens[i + 4], tokens[i + 6], int(tokens[i + 8])
                        fields.append((fname, value, number, True, key))
                        i += 10
                    elif tokens[i] in ("optional", "repeated", "required"):
                        fields.append((tokens[i + 2], tokens[i + 1], int(tokens[i + 4]), tokens[i] == "repeated",
                                       None))
                        i += 6
                    elif tokens[i] in ("option", "reserved"):
                        while tokens[i] != ";":
                            i += 1
                        i += 1
                    else:
                        raise ValueError(f"{path}: unexpected {tokens[i]!r} in message {msg.name}")
                i += 1
                messages[msg.name] = msg
                pending.append((package, msg, fields))
            else:
                raise ValueError(f"{path}: unexpected {tok!r}")
    for package, msg, fields in pending:
        for fname, ftype, number, repeated, key in fields:
            if ftype not in _SCALARS:
                ftype = ftype[1:] if ftype.startswith(".") else f"{package}.{ftype}"
                if ftype not in messages:
                    raise ValueError(f"{msg.name}.{fname}: unknown type {ftype}")
            f = Field(_json_name(msg.name, fname), number, ftype, repeated, key)
            msg.by_number[number] = f
            msg.by_json[f.name] = f
    _align_with_openapi(messages)
    return messages


_DEFINITION_PREFIXES = (("k8s.io.api.", "io.k8s.api."), ("k8s.io.apimachinery.", "io.k8s.apimachinery."),
                        ("k8s.io.kube_aggregator.", "io.k8s.kube-aggregator."),
                        ("k8s.io.apiextensions_apiserver.", "io.k8s.apiextensions-apiserver."))


def _definition_of(message: str) -> dict[str, Any] | None:
    for proto, definition in _DEFINITION_PREFIXES:
        if message.startswith(proto):
            return schema.definitions().get(definition + message[len(proto):])
    return None


def _align_with_openapi(messages: dict[str, Message]) -> None:
    """Where proto field names differ from JSON names, take the JSON names from the OpenAPI definitions.

    Two differences exist: a few fields are spelled differently (``Webhooks``, ``uID``,
    ``aPIGroup``), and structs embedded inline in Go (a Volume's ``volumeSource``, a
    Probe's ``handler``) are a nested message in proto but flat in JSON.
    """
    for msg in messages.values():
        if msg.name.startswith(JSON_SCHEMA):
            continue
        definition = _definition_of(msg.name)
        props = set((definition or {}).get("properties") or {})
        if not props:
            continue
        lower = {p.lower(): p for p in props}
        for f in list(msg.by_number.values()):
            if f.name in props:
                continue
            if f.name.lower() in lower:
                del msg.by_json[f.name]
                f.name = lower[f.name.lower()]
                msg.by_json[f.name] = f
            elif f.type in messages and not f.repeated and f.map_key is None:
                inner = set(messages[f.type].by_json)
                if inner and inner & props:
                    f.inline = True


_lock = threading.Lock()
_messages: dict[str, Message] | None = None


def messages() -> dict[str, Message]:
    """The compiled messages (once per process)."""
    global _messages
    if _messages is None:
        with _lock:
            if _messages is None:
                _messages = compile_protos(_proto_root())
    return _messages


def message_for(api_version: str, kind: str) -> Message | None:
    """The message of a kind (``apps/v1``, ``Deployment``), lists and meta kinds included."""
    group, _, version = api_version.rpartition("/")
    msgs = messages()
    if kind in ("Status", "DeleteOptions", "WatchEvent", "APIResourceList", "Table", "PartialObjectMetadata",
                "PartialObjectMetadataList", "CreateOptions", "PatchOptions", "UpdateOptions", "GetOptions",
                "ListOptions"):
        return msgs.get(META + kind)
    base = kind.removesuffix("List")
    name = schema.definition_for(group, version, base)
    if name is None:
        return None
    for prefix, proto in (("io.k8s.api.", "k8s.io.api."), ("io.k8s.apimachinery.", "k8s.io.apimachinery."),
                          ("io.k8s.kube-aggregator.", "k8s.io.kube_aggregator."),
                          ("io.k8s.apiextensions-apiserver.", "k8s.io.apiextensions_apiserver.")):
        if name.startswith(prefix):
            full = proto + name[len(prefix):]
            return msgs.get(full + "List" if kind.endswith("List") else full)
    return None


def has_message(rt: ResourceType) -> bool:
    """Whether objects of ``rt`` can travel as protobuf (built-in kinds with an upstream message)."""
    return rt.builtin and message_for(rt.group_version, rt.kind) is not None


# --------------------------------------------------------------------------- wire format


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _signed(value: int, bits: int = 64) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """``(number, wire type, value)`` of every field in ``data``."""
    out = []
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: Any
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _scalar_from_wire(ftype: str, wire: int, value: Any) -> Any:
    if ftype == "string":
        return bytes(value).decode("utf-8")
    if ftype == "bytes":
        return bytes(value)
    if ftype == "bool":
        return bool(value)
    if ftype in ("int64", "int32"):
        return _signed(value)
    if ftype in ("sint32", "sint64"):
        return (value >> 1) ^ -(value & 1)
    if ftype in ("uint32", "uint64"):
        return value
    if ftype == "double":
        return struct.unpack("<d", value)[0]
    if ftype == "float":
        return struct.unpack("<f", value)[0]
    if ftype in ("fixed64", "sfixed64"):
        return struct.unpack("<q" if ftype.startswith("s") else "<Q", value)[0]
    if ftype in ("fixed32", "sfixed32"):
        return struct.unpack("<i" if ftype.startswith("s") else "<I", value)[0]
    raise ValueError(f"unsupported type {ftype}")


def _scalar_to_wire(ftype: str, value: Any) -> tuple[int, bytes]:
    if ftype == "string":
        data = str(value).encode("utf-8")
        return 2, _varint(len(data)) + data
    if ftype == "bytes":
        return 2, _varint(len(value)) + bytes(value)
    if ftype == "bool":
        return 0, _varint(1 if value else 0)
    if ftype in ("int64", "int32", "uint32", "uint64"):
        return 0, _varint(int(value))
    if ftype in ("sint32", "sint64"):
        v = int(value)
        return 0, _varint((v << 1) ^ (v >> 63))
    if ftype == "double":
        return 1, struct.pack("<d", float(value))
    if ftype == "float":
        return 5, struct.pack("<f", float(value))
    if ftype in ("fixed64", "sfixed64"):
        return 1, struct.pack("<q" if ftype.startswith("s") else "<Q", int(value))
    if ftype in ("fixed32", "sfixed32"):
        return 5, struct.pack("<i" if ftype.startswith("s") else "<I", int(value))
    raise ValueError(f"unsupported type {ftype}")


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


# --------------------------------------------------------------------------- Kubernetes JSON mapping

def _format_time(seconds: int, nanos: int, micro: bool) -> str:
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{nanos // 1000:06d}Z" if micro else text + "Z"


def _parse_time(text: str) -> tuple[int, int]:
    m = re.match(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$", text)
    if not m:
        raise ValueError(f"invalid time {text!r}")
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        seconds -= sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
    nanos = int((m.group(2) or "0").ljust(9, "0")[:9])
    return seconds, nanos


_DURATION_UNITS = (("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9), ("ms", 10**6), ("us", 10**3),
                   ("µs", 10**3), ("ns", 1))


def _format_duration(nanos: int) -> str:
    """Go's time.Duration.String()."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    n = abs(nanos)
    if n < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if n >= size:
                value = n / size
                return f"{sign}{value:g}{unit}"
    hours, rest = divmod(n, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = rest / 10**9
    text = f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _parse_duration(text: str) -> int:
    total, rest = 0.0, text.strip()
    sign = -1 if rest.startswith("-") else 1
    rest = rest.lstrip("+-")
    for number, unit in re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", rest):
        total += float(number) * dict(_DURATION_UNITS)[unit]
    return sign * int(total)


def _decode_message(msg: Message, data: bytes) -> Any:
    """A message as the Kubernetes JSON mapping shows it."""
    name = msg.name
    raw = _fields(data)
    if name in (TIME, MICRO_TIME):
        seconds = nanos = 0
        for number, _, value in raw:
            if number == 1:
                seconds = _signed(value)
            elif number == 2:
                nanos = _signed(value)
        if seconds == 0 and nanos == 0:
            return None
        return _format_time(seconds, nanos, name == MICRO_TIME)
    if name == DURATION:
        return _format_duration(next((_signed(v) for n, _, v in raw if n == 1), 0))
    if name == QUANTITY:
        return next((bytes(v).decode() for n, _, v in raw if n == 1), "0")
    if name == INT_OR_STRING:
        kind, int_val, str_val = 0, 0, ""
        for number, _, value in raw:
            if number == 1:
                kind = value
            elif number == 2:
                int_val = _signed(value)
            elif number == 3:
                str_val = bytes(value).decode()
        return str_val if kind == 1 else int_val
    if name in RAW_JSON:
        blob = next((bytes(v) for n, _, v in raw if n == 1), b"")
        if not blob:
            return None
        if blob.startswith(MAGIC):
            return decode(blob)
        try:
            return json.loads(blob)
        except ValueError:
            raise errors.bad_request(f"{name.rsplit('.', 1)[-1]}: embedded data is not JSON") from None
    if name == JSON_SCHEMA + "JSONSchemaPropsOrBool":
        values = {n: v for n, _, v in raw}
        if 2 in values:
            return _decode_message(messages()[JSON_SCHEMA + "JSONSchemaProps"], bytes(values[2]))
        return bool(values.get(1, 0))
    if name in (JSON_SCHEMA + "JSONSchemaPropsOrArray", JSON_SCHEMA + "JSONSchemaPropsOrStringArray"):
        props = messages()[JSON_SCHEMA + "JSONSchemaProps"]
        array = [(_decode_message(props, bytes(v)) if name.endswith("OrArray") else bytes(v).decode())
                 for n, _, v in raw if n == 2]
        schema_part = next((_decode_message(props, bytes(v)) for n, _, v in raw if n == 1), None)
        return array if array or schema_part is None else schema_part
    out: dict[str, Any] = {}
    for number, wire, value in raw:
        f = msg.by_number.get(number)
        if f is None:
            continue  # a field newer than our definitions: ignored, as Go's decoder does
        if f.map_key is not None:
            entry = {n: (w, v) for n, w, v in _fields(bytes(value))}
            key = _value(f.map_key, msg, *entry[1]) if 1 in entry else ""
            item = _value(f.type, msg, *entry[2]) if 2 in entry else _zero(f.type)
            out.setdefault(f.name, {})[key] = item
        elif f.repeated:
            if wire == 2 and f.type in _SCALARS and f.type not in ("string", "bytes"):
                packed, pos = bytes(value), 0  # packed scalars
                items = []
                while pos < len(packed):
                    v, pos = _read_varint(packed, pos) if f.type in _VARINT else (packed[pos:pos + 8], pos + 8)
                    items.append(_scalar_from_wire(f.type, 0, v))
                out.setdefault(f.name, []).extend(items)
            else:
                out.setdefault(f.name, []).append(_value(f.type, msg, wire, value))
        elif f.inline:
            inner = _value(f.type, msg, wire, value)
            if isinstance(inner, dict):
                out.update(inner)
        else:
            out[f.name] = _value(f.type, msg, wire, value)
    if msg.wrapper:
        return out.get("items", [])
    for k in [k for k, v in out.items() if _droppable(k, v)]:
        del out[k]
    return out


def _zero(ftype: str) -> Any:
    return "" if ftype in ("string", "bytes") else 0 if ftype in _SCALARS - {"bool"} else False \
        if ftype == "bool" else {}


def _value(ftype: str, parent: Message, wire: int, value: Any) -> Any:
    if ftype in _SCALARS:
        out = _scalar_from_wire(ftype, wire, value)
        return base64.b64encode(out).decode() if ftype == "bytes" else out
    return _decode_message(messages()[ftype], bytes(value))


def _droppable(name: str, value: Any) -> bool:
    if value is None:
        return True
    if value == "" and name not in KEEP_EMPTY_STRINGS:
        return True
    return name in DROP_ZERO and (value is False or value == 0)


def _encode_message(msg: Message, obj: Any) -> bytes:
    """The bytes of ``obj`` (Kubernetes JSON) as message ``msg``."""
    name = msg.name
    if name in (TIME, MICRO_TIME):
        seconds, nanos = _parse_time(str(obj))
        return _key(1, 0) + _varint(seconds) + (_key(2, 0) + _varint(nanos) if nanos else b"")
    if name == DURATION:
        return _key(1, 0) + _varint(_parse_duration(str(obj)))
    if name == QUANTITY:
        return _scalar_field(1, "string", obj if isinstance(obj, str) else _number_text(obj))
    if name == INT_OR_STRING:
        if isinstance(obj, str):
            return _key(1, 0) + _varint(1) + _scalar_field(3, "string", obj)
        return _key(1, 0) + _varint(0) + _key(2, 0) + _varint(int(obj))
    if name in RAW_JSON:
        return _scalar_field(1, "bytes", json.dumps(obj, separators=(",", ":")).encode())
    if name == JSON_SCHEMA + "JSONSchemaPropsOrBool":
        if isinstance(obj, bool):
            return _key(1, 0) + _varint(1 if obj else 0)
        return _key(1, 0) + _varint(1) + _message_field(2, messages()[JSON_SCHEMA + "JSONSchemaProps"], obj)
    if name in (JSON_SCHEMA + "JSONSchemaPropsOrArray", JSON_SCHEMA + "JSONSchemaPropsOrStringArray"):
        props = messages()[JSON_SCHEMA + "JSONSchemaProps"]
        if isinstance(obj, list):
            return b"".join(_message_field(2, props, o) if name.endswith("OrArray")
                            else _scalar_field(2, "string", o) for o in obj)
        return _message_field(1, props, obj)
    if msg.wrapper:
        obj = {"items": obj}
    if not isinstance(obj, dict):
        raise TypeError(f"{name}: expected an object")
    out = bytearray()
    for f in msg.by_number.values():
        if f.inline:
            inner_names = messages()[f.type].by_json
            part = {k: v for k, v in obj.items() if k in inner_names or (k not in msg.by_json and _inlined_deep(
                messages()[f.type], k))}
            if part:
                out += _message_field(f.number, messages()[f.type], part)
    for key, value in obj.items():
        named = msg.by_json.get(key)
        if named is None or value is None or named.inline:
            continue
        f = named
        if f.map_key is not None:
            for k, v in (value or {}).items():
                entry = _scalar_field(1, f.map_key, k) + _typed_field(2, f.type, v)
                out += _key(f.number, 2) + _varint(len(entry)) + entry
        elif f.repeated:
            for item in value or []:
                out += _typed_field(f.number, f.type, item)
        else:
            out += _typed_field(f.number, f.type, value)
    return bytes(out)


def _inlined_deep(msg: Message, key: str) -> bool:
    """Whether ``key`` belongs to an inline field further down (RuleWithOperations inside NamedRule...)."""
    return any(f.inline and (key in messages()[f.type].by_json or _inlined_deep(messages()[f.type], key))
               for f in msg.by_number.values())


def _number_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _scalar_field(number: int, ftype: str, value: Any) -> bytes:
    wire, data = _scalar_to_wire(ftype, value)
    return _key(number, wire) + data


def _message_field(number: int, msg: Message, value: Any) -> bytes:
    data = _encode_message(msg, value)
    return _key(number, 2) + _varint(len(data)) + data


def _typed_field(number: int, ftype: str, value: Any) -> bytes:
    if ftype in _SCALARS:
        if ftype == "bytes" and isinstance(value, str):
            value = base64.b64decode(value)
        return _scalar_field(number, ftype, value)
    return _message_field(number, messages()[ftype], value)


# --------------------------------------------------------------------------- envelopes


def _unknown(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _scalar_field(1, "string", api_version) + _scalar_field(2, "string", kind)
    body = _key(1, 2) + _varint(len(type_meta)) + type_meta + _scalar_field(2, "bytes", raw) + \
        _scalar_field(3, "string", "") + _scalar_field(4, "string", "")
    return MAGIC + body


def decode(data: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for (400 when it is not one)."""
    if not data.startswith(MAGIC):
        raise errors.bad_request("the body is not a Kubernetes protobuf envelope (missing the k8s prefix)")
    try:
        fields = {n: v for n, _, v in _fields(data[len(MAGIC):])}
        type_meta = {n: bytes(v).decode() for n, _, v in _fields(bytes(fields.get(1, b"")))}
        api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        msg = message_for(api_version, kind)
        if msg is None:
            raise errors.ApiError(415, "UnsupportedMediaType",
                                  f"no protobuf message is known for {kind} in {api_version or 'v1'}", {})
        obj = _decode_message(msg, bytes(fields.get(2, b"")))
    except (ValueError, KeyError, UnicodeDecodeError, struct.error) as exc:
        raise errors.bad_request(f"unable to decode the protobuf body: {exc}") from None
    if not isinstance(obj, dict):
        raise errors.bad_request("the protobuf body is not an object")
    return {"apiVersion": api_version, "kind": kind, **obj}


def encode(body: dict[str, Any], rt: ResourceType | None = None) -> bytes | None:
    """``body`` (an object or list of a built-in kind) as a protobuf envelope, or None if it has no message."""
    api_version = str(body.get("apiVersion") or (rt.group_version if rt else ""))
    kind = str(body.get("kind") or "")
    msg = message_for(api_version, kind)
    if msg is None:
        return None
    try:
        raw = _encode_message(msg, {k: v for k, v in body.items() if k not in ("apiVersion", "kind")})
    except (ValueError, TypeError) as exc:
        raise errors.internal(f"encoding {kind} as protobuf: {exc}") from None
    return _unknown(api_version, kind, raw)


def encode_watch_event(event: dict[str, Any], rt: ResourceType) -> bytes:
    """One frame of a protobuf watch stream: length, then the envelope of a ``WatchEvent``."""
    obj = event["object"]
    inner = encode(obj, rt) if obj.get("kind") not in ("Status",) else encode(obj)
    raw = _scalar_field(1, "string", event["type"])
    if inner is not None:
        wrapped = _scalar_field(1, "bytes", inner)
        raw += _key(2, 2) + _varint(len(wrapped)) + wrapped
    envelope = _unknown(rt.group_version, "WatchEvent", raw)
    return struct.pack(">I", len(envelope)) + envelope
