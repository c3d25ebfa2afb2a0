"""Check a JSON value against an official SDK's request type: unknown keys, missing required keys,
wrong types and values outside a Literal, at every level.

The SDKs' request types are generated from the providers' own API specifications (openai and
anthropic: Stainless TypedDicts, "File generated from our OpenAPI spec"; google-genai: pydantic
models with ``extra="forbid"`` and camelCase aliases), so they are first-hand evidence of which
fields the APIs accept. The SDKs themselves do not check them at runtime (a TypedDict is a plain
dict; extra keys pass), which is why this walker exists: the emulator refuses what the types do
not allow, as the real APIs do, and tests/test_sdk_requests.py holds batchrun's request files to
the same types.

``check(value, tp)`` returns the violations found (empty: the value fits); each names its path
(``("messages", 0, "foo")``), its kind and what was expected. Unions are tried member by member;
when none fits, the violations of the member the value most looks like (the one whose ``Literal``
discriminators it matches: ``role``, ``type``) are reported, or a type violation naming them all.
Keys the type declares with ``Annotated[..., PropertyInfo(alias=...)]`` are matched by their wire
name; pydantic fields by alias and, as proto-JSON allows (``_common.BaseModel`` sets
``populate_by_name``), by field name too.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["unknown", "missing", "type", "value"]
Path = tuple[str | int, ...]

_REQUIRED_WRAPPERS = {"Required", "NotRequired", "ReadOnly"}


@dataclass(frozen=True)
class Violation:
    kind: Kind
    path: Path
    expected: str = ""  # "an integer", "one of 'user', 'assistant'" ...
    got: str = ""  # the JSON type (or value) received

    @property
    def key(self) -> str:
        """The last key of the path (the unknown or missing field's name)."""
        for part in reversed(self.path):
            if isinstance(part, str):
                return part
        return ""


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, as the providers word it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "decimal number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def dotted(path: Path, style: Literal["openai", "anthropic", "google"] = "openai") -> str:
    """A path as each provider writes it: OpenAI ``messages[0].content``, Anthropic
    ``messages.0.content``, Google ``contents[0].parts``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f".{part}" if style == "anthropic" else f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# --------------------------------------------------------------------------- the walker


def check(value: Any, tp: Any, path: Path = ()) -> list[Violation]:
    """The violations of ``value`` (decoded JSON) against the type ``tp``; [] when it fits."""
    tp = _strip(tp)
    if tp is Any or tp is object:
        return []
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _check_union(value, typing.get_args(tp), path)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if any(value == a and type(value) is type(a) for a in allowed):
            return []
        if all(isinstance(a, str) for a in allowed) and not isinstance(value, str):
            return [Violation("type", path, "a string", json_type(value))]
        return [Violation("value", path, "one of " + ", ".join(repr(a) for a in allowed), repr(value))]
    if tp is type(None):
        return [] if value is None else [Violation("type", path, "null", json_type(value))]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        if value in values:
            return []
        return [Violation("value" if isinstance(value, str) else "type", path, "one of " + ", ".join(repr(v) for v in values), repr(value))]
    if tp in (str, bytes):  # bytes: base64 text on the wire (google-genai inline data)
        return [] if isinstance(value, str) else [Violation("type", path, "a string", json_type(value))]
    if tp is bool:
        return [] if isinstance(value, bool) else [Violation("type", path, "a boolean", json_type(value))]
    if tp is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [Violation("type", path, "an integer", json_type(value))]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [Violation("type", path, "a number", json_type(value))]
    if _is_typeddict(tp):
        return _check_typeddict(value, tp, path)
    if _is_model(tp):
        return _check_model(value, tp, path)
    if origin in (dict, Mapping) or tp in (dict, Mapping) or origin is typing.Dict:
        if not isinstance(value, dict):
            return [Violation("type", path, "an object", json_type(value))]
        args = typing.get_args(tp)
        item = args[1] if len(args) == 2 else Any
        return [v for k, x in value.items() for v in check(x, item, (*path, str(k)))]
    if origin in (list, Iterable, Sequence, tuple) or tp in (list, tuple) or origin is typing.List:
        if not isinstance(value, list):
            return [Violation("type", path, "an array", json_type(value))]
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return [v for i, x in enumerate(value) for v in check(x, item, (*path, i))]
    # A type this walker does not know (datetime, a Protocol ...): not ours to refuse.
    return []


def _strip(tp: Any) -> Any:
    """Without Annotated, Required/NotRequired/ReadOnly and type aliases."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif getattr(typing.get_origin(tp), "_name", None) in _REQUIRED_WRAPPERS or _wrapper_name(tp) in _REQUIRED_WRAPPERS:
            tp = typing.get_args(tp)[0]
        elif hasattr(tp, "__value__"):  # PEP 695 / typing_extensions.TypeAliasType
            tp = tp.__value__
        else:
            return tp


def _wrapper_name(tp: Any) -> str | None:
    origin = typing.get_origin(tp)
    name = getattr(origin, "_name", None) or getattr(origin, "__name__", None)
    return name if isinstance(name, str) else None


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_fields") and hasattr(tp, "model_config")


@dataclass(frozen=True)
class _Field:
    tp: Any
    required: bool
    name: str  # the field's own name (for pydantic: as declared, snake_case)


@functools.cache
def fields_of(tp: Any) -> dict[str, _Field]:
    """Wire key -> field, for a TypedDict or a pydantic model (cached per class)."""
    out: dict[str, _Field] = {}
    if _is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        for name, hint in hints.items():
            wrapper = _outer_wrapper(hint)
            required = wrapper == "Required" or (wrapper != "NotRequired" and bool(tp.__total__))
            key = _alias(hint) or name
            out[key] = _Field(hint, required, name)
        return out
    for name, info in tp.model_fields.items():
        field = _Field(info.annotation, info.is_required(), name)
        out[info.alias or name] = field
        out.setdefault(name, field)  # proto-JSON: the field name is accepted as well as the alias
    return out


def _outer_wrapper(hint: Any) -> str | None:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return _wrapper_name(hint) if _wrapper_name(hint) in _REQUIRED_WRAPPERS else None


def _alias(hint: Any) -> str | None:
    """The wire name of a Stainless field declared ``Annotated[T, PropertyInfo(alias=...)]``."""
    for _ in range(4):
        if typing.get_origin(hint) is typing.Annotated:
            for meta in typing.get_args(hint)[1:]:
                alias = getattr(meta, "alias", None)
                if isinstance(alias, str):
                    return alias
            hint = typing.get_args(hint)[0]
        elif _wrapper_name(hint) in _REQUIRED_WRAPPERS:
            hint = typing.get_args(hint)[0]
        else:
            break
    return None


def _check_typeddict(value: Any, tp: Any, path: Path) -> list[Violation]:
    if not isinstance(value, dict):
        return [Violation("type", path, "an object", json_type(value))]
    fields = fields_of(tp)
    found: list[Violation] = []
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            found.append(Violation("unknown", (*path, key)))
        else:
            found.extend(check(item, field.tp, (*path, key)))
    for key, field in fields.items():
        if field.required and key not in value:
            found.append(Violation("missing", (*path, key)))
    return found


def _check_model(value: Any, tp: Any, path: Path) -> list[Violation]:
    if not isinstance(value, dict):
        return [Violation("type", path, "an object", json_type(value))]
    fields = fields_of(tp)
    found: list[Violation] = []
    seen: set[str] = set()
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            found.append(Violation("unknown", (*path, key)))
            continue
        seen.add(field.name)
        if item is None:  # proto-JSON: null is the field's default
            continue
        found.extend(check(item, field.tp, (*path, key)))
    for key, field in fields.items():
        if field.required and field.name not in seen and key == field.name:
            found.append(Violation("missing", (*path, key)))
    return found


def _check_union(value: Any, members: tuple[Any, ...], path: Path) -> list[Violation]:
    options = [_strip(m) for m in members]
    if value is None and type(None) in options:
        return []
    results = []
    for member in (m for m in options if m is not type(None)):
        found = check(value, member, path)
        if not found:
            return []
        results.append((member, found))
    # None fits. Report against the members of the value's own JSON kind (an array against the
    # array member of ``str | list``), and among objects against the one whose Literal
    # discriminators (``role``, ``type``) the value carries, the closest fit first.
    kinds = _value_kinds(value)
    same = [(m, f) for m, f in results if _type_kind(m) in kinds]
    if isinstance(value, dict) and len(same) > 1:
        claimed = [(m, f) for m, f in same if _discriminators_match(value, m)]
        if not claimed:
            wrong = _wrong_discriminator(value, [m for m, _ in same], path)
            if wrong is not None:
                return [wrong]
        same = claimed or same
    if same:
        return min(same, key=lambda r: len(r[1]))[1]
    names = sorted({_describe(m) for m, _ in results})
    return [Violation("type", path, names[0] if len(names) == 1 else "one of " + " or ".join(names), json_type(value))]


def _value_kinds(value: Any) -> set[str]:
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return {"null"}


def _type_kind(tp: Any) -> str:
    return {"a string": "string", "an integer": "integer", "a number": "number", "a boolean": "boolean",
            "an object": "object", "an array": "array"}.get(_describe(tp), "other")


def _literals(tp: Any) -> dict[str, tuple[Any, ...]]:
    if not (_is_typeddict(tp) or _is_model(tp)):
        return {}
    return {k: typing.get_args(_strip(f.tp)) for k, f in fields_of(tp).items() if typing.get_origin(_strip(f.tp)) is Literal}


def _discriminators_match(value: dict, tp: Any) -> bool:
    """True when ``value`` carries at least one Literal-typed key of ``tp`` and every one it
    carries (or ``tp`` requires) has an allowed value."""
    literals = _literals(tp)
    fields = fields_of(tp) if literals else {}
    present = [k for k in literals if k in value]
    if not present:
        return False
    return all(k in value and value[k] in allowed for k, allowed in literals.items() if k in value or fields[k].required)


def _wrong_discriminator(value: dict, members: list[Any], path: Path) -> Violation | None:
    """A discriminator every member declares (``role`` of a chat message) with a value none allows."""
    tables = [_literals(m) for m in members]
    common = set(tables[0]).intersection(*tables[1:]) if tables else set()
    for key in sorted(common):
        allowed = list(dict.fromkeys(a for t in tables for a in t[key]))  # in the type's own order
        if key in value and value[key] not in allowed:
            return Violation("value", (*path, key), "one of " + ", ".join(repr(a) for a in allowed), repr(value[key]))
    return None


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp in (str, bytes) or origin is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        return "a string"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "a boolean"
    if _is_typeddict(tp) or _is_model(tp) or origin in (dict, Mapping) or tp is dict:
        return "an object"
    if origin in (list, Iterable, Sequence, tuple) or tp in (list, tuple):
        return "an array"
    return "a value"
