"""Turn recorded values into text and back, with the same type on replay.

cairn stores step outputs and task arguments and results as text. On replay it
must hand back a value equal to, and of the same type as, what the first run
produced, so that a resumed run works on the same data as the run that crashed.

Format of ``JsonCodec`` (the default)
-------------------------------------
Plain JSON values -- ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys -- are written as ordinary compact JSON,
so ``{"a": 1}`` is stored as ``{"a":1}``. Every other supported value is written
as a tagged object::

    {"$cairn": TAG, "v": ...}                     builtin and stdlib types
    {"$cairn": TAG, "type": "mod:Qual", "v": ...} enums, dataclasses, pydantic

==============  ===============================================================
tag             ``v`` holds
==============  ===============================================================
``datetime``    ISO 8601 text with its UTC offset (naive datetimes, and offsets
                with fractions of a second, are refused)
``date``        ISO 8601 text
``time``        ISO 8601 text (with the offset if it has one)
``timedelta``   ``[days, seconds, microseconds]``
``bytes``       base64 text
``decimal``     ``str(value)``
``uuid``        ``str(value)``
``tuple``       the items, each encoded
``set``         the items, each encoded, sorted by their encoded text
``frozenset``   as ``set``
``dict``        ``[[key, value], ...]`` pairs, for dicts with a key that is not
                a ``str`` or that is ``"$cairn"`` (so user data is never taken
                for a tag)
``enum``        the member's ``value``, encoded; ``type`` names the enum class
``dataclass``   ``{field: encoded value}`` for every field; ``type`` names it
``pydantic``    ``model_dump(mode="json")``, encoded; ``type`` names the model
==============  ===============================================================

Dict key order is kept, so the same value always gives the same text; cairn
relies on that when it compares stored task arguments with new ones. A datetime
comes back with a fixed-offset ``timezone``: the same instant and offset, but a
zone name such as ``ZoneInfo("Europe/Paris")`` is not kept.

Anything else is refused with a ``CodecError`` that names the type and where in
the value it was found. So is text holding a lone surrogate (``"abc\\ud800"``,
in a string or a dict key, however deep): it is not valid Unicode, and no
store can write it. ``PickleCodec`` records any picklable value instead, but
only use it with a store you trust: decoding it runs pickle.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import json
import math
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Protocol

from cairn.errors import CodecError, ConfigurationError

__all__ = ["Codec", "JsonCodec", "PickleCodec", "codec_for", "refuse_surrogates", "storable_text"]

TAG = "$cairn"
_MARK = f'"{TAG}"'  # every tagged object's text contains this; plain JSON never does
_PLAIN = frozenset({str, int, bool, type(None)})
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
)
_dumps = _ENCODER.encode
_ADVICE = (
    "return plain data (dict, list, str, int, float, bool, None), a dataclass or a "
    "pydantic model instead, or opt in to PickleCodec if you trust the store."
)


class Codec(Protocol):
    """Turns values into text for the record and back."""

    name: str  # stored beside each value, so the right codec decodes it

    def encode(self, value: Any) -> str:
        """Return the text to record for ``value``; raise ``CodecError`` if impossible."""
        ...

    def decode(self, text: str) -> Any:
        """Return the value that ``text`` records; raise ``CodecError`` if impossible."""
        ...


class JsonCodec:
    """The default codec: readable JSON, with tags for types JSON lacks."""

    name = "json"

    def encode(self, value: Any) -> str:
        """Return compact, deterministic JSON text for ``value``."""
        kind = type(value)
        # Fast paths for the commonest step outputs; bool is checked by exact type
        # so True never takes the int path. Floats go the general way (NaN checks).
        if kind is int:
            return str(value)
        if value is None:
            return "null"
        try:
            text = _dumps(_tree(value))
        except _EncodeError as problem:
            raise CodecError(problem.message()) from problem.__cause__
        except RecursionError as err:
            raise CodecError(
                "cannot record a value that is nested too deeply or contains itself."
            ) from err
        # isascii() is O(1); only other text can hold a lone surrogate, which no
        # store can write (its UTF-8 does not exist): refuse it here, named.
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise CodecError(_surrogate_message(value)) from None
        return text

    def decode(self, text: str) -> Any:
        """Return the value that ``text`` records, with the types it had."""
        try:
            if _MARK not in text:
                return _PLAIN_DECODER(text)
            return _TAGGED_DECODER(text)
        except json.JSONDecodeError as err:
            raise CodecError(f"cannot decode the record: it is not valid JSON ({err}).") from err
        except RecursionError as err:
            raise CodecError("cannot decode the record: it is nested too deeply.") from err


class PickleCodec:
    """Opt-in codec for any picklable value, stored as base64 of a pickle.

    Only use it for stores you trust: decoding runs pickle, and a crafted record
    can run any code. It also ties the record to your classes' pickled layout.
    """

    name = "pickle"

    def encode(self, value: Any) -> str:
        """Return base64 text of ``pickle.dumps(value, protocol=5)``."""
        import pickle

        try:
            data = pickle.dumps(value, protocol=5)
        except Exception as err:
            name = _type_name(type(value))
            raise CodecError(f"cannot pickle a value of type {name}: {err}") from err
        return base64.b64encode(data).decode("ascii")

    def decode(self, text: str) -> Any:
        """Return the value unpickled from the base64 ``text``."""
        import pickle

        try:
            data = base64.b64decode(text, validate=True)
            return pickle.loads(data)  # noqa: S301 - opt-in codec, documented as trusted-store-only
        except Exception as err:
            raise CodecError(f"cannot unpickle the record: {type(err).__name__}: {err}") from err


_CODECS: dict[str, Callable[[], Codec]] = {"json": JsonCodec, "pickle": PickleCodec}


def codec_for(name: str, *, trust_pickle: bool = False) -> Codec:
    """Return the codec stored under ``name``.

    ``"pickle"`` only with ``trust_pickle``: the name comes from a record in the
    store, and an app that did not opt in to pickle must never unpickle what a
    store row says to (a crafted row would run code in it).
    """
    if name == PickleCodec.name and not trust_pickle:
        raise CodecError(
            "this record was written with the pickle codec, and this app does not "
            "unpickle: decoding it could run any code a crafted record holds. If you "
            'trust the store, give the app codec="pickle" (or cairn.PickleCodec()) '
            "and run or retry the task from it; nothing recorded was changed."
        )
    factory = _CODECS.get(name)
    if factory is None:
        known = ", ".join(repr(n) for n in _CODECS)
        raise ConfigurationError(f"unknown codec {name!r}; the codecs are: {known}.")
    return factory()


# --- encoding: value -> JSON-safe tree ----------------------------------------


class _EncodeError(Exception):
    """Raised inside the walk; collects the path as it unwinds."""

    def __init__(self, what: str, advice: str) -> None:
        super().__init__(what)
        self.what = what
        self.advice = advice
        self.parts: list[str] = []  # innermost first

    def message(self) -> str:
        path = "$" + "".join(reversed(self.parts))
        return f"cannot record {self.what} (found at {path}): {self.advice}"


def _type_name(t: type[Any]) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _key_part(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


def _tag(tag: str, v: Any) -> dict[str, Any]:
    return {TAG: tag, "v": v}


def _tree(v: Any) -> Any:
    t = type(v)
    if t in _PLAIN:
        return v
    if t is dict:
        return _dict_tree(v)
    if t is list:
        return _items_tree(v)
    if t is float:
        return _float_tree(v)
    return _tagged_tree(v, t)


def _float_tree(v: float) -> float:
    if math.isfinite(v):
        return v
    raise _EncodeError(f"the float {v!r}", "JSON has no NaN or infinity; record None or a str.")


def _dict_tree(d: dict[Any, Any]) -> Any:
    out: dict[str, Any] = {}
    for key, x in d.items():
        if type(key) is not str or key == TAG:
            return _pairs_tree(d)
        try:
            out[key] = x if type(x) in _PLAIN else _tree(x)
        except _EncodeError as problem:
            problem.parts.append(_key_part(key))
            raise
    return out


def _pairs_tree(d: dict[Any, Any]) -> dict[str, Any]:
    pairs: list[list[Any]] = []
    for i, (key, x) in enumerate(d.items()):
        try:
            k = _tree(key)
        except _EncodeError as problem:
            problem.parts.append(f".keys()[{i}]")
            raise
        try:
            pairs.append([k, _tree(x)])
        except _EncodeError as problem:
            problem.parts.append(f"[{key!r}]")
            raise
    return _tag("dict", pairs)


def _items_tree(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for i, x in enumerate(items):
        try:
            out.append(x if type(x) in _PLAIN else _tree(x))
        except _EncodeError as problem:
            problem.parts.append(f"[{i}]")
            raise
    return out


def _set_tree(tag: str, items: Iterable[Any]) -> dict[str, Any]:
    try:
        trees = [_tree(x) for x in items]
    except _EncodeError as problem:
        problem.parts.append("[*]")
        raise
    return _tag(tag, sorted(trees, key=_dumps))


def _datetime_tree(v: datetime) -> dict[str, Any]:
    if v.utcoffset() is None:
        raise _EncodeError(
            "a naive datetime",
            "use a tz-aware datetime, e.g. datetime.now(timezone.utc), so that replay "
            "means the same instant.",
        )
    _check_offset(v.utcoffset())
    return _tag("datetime", v.isoformat())


def _time_tree(v: time) -> dict[str, Any]:
    if v.tzinfo is not None and v.utcoffset() is None:
        raise _EncodeError("a time whose tzinfo gives no offset", "use a fixed-offset timezone.")
    _check_offset(v.utcoffset())
    return _tag("time", v.isoformat())


def _check_offset(offset: timedelta | None) -> None:
    # ISO 8601 has no fractions of a second in offsets; Python 3.11 drops them on parsing.
    if offset is not None and offset.microseconds:
        raise _EncodeError(
            f"a UTC offset of {offset}", "offsets must be whole seconds; use timezone.utc."
        )


_BY_TYPE: dict[type[Any], Callable[[Any], Any]] = {
    datetime: _datetime_tree,
    date: lambda v: _tag("date", v.isoformat()),
    time: _time_tree,
    timedelta: lambda v: _tag("timedelta", [v.days, v.seconds, v.microseconds]),
    bytes: lambda v: _tag("bytes", base64.b64encode(v).decode("ascii")),
    Decimal: lambda v: _tag("decimal", str(v)),
    uuid.UUID: lambda v: _tag("uuid", str(v)),
    tuple: lambda v: _tag("tuple", _items_tree(v)),
    set: lambda v: _set_tree("set", v),
    frozenset: lambda v: _set_tree("frozenset", v),
}


def _tagged_tree(v: Any, t: type[Any]) -> Any:
    by_type = _BY_TYPE.get(t)
    if by_type is not None:
        return by_type(v)
    if isinstance(v, enum.Enum):
        return _enum_tree(v)
    if hasattr(t, "model_validate") and hasattr(v, "model_dump"):
        return _pydantic_tree(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _dataclass_tree(v)
    raise _EncodeError(f"a value of type {_type_name(t)}", _ADVICE)


_PATHS: dict[type[Any], str] = {}  # classes already checked to import back


def _type_path(t: type[Any]) -> str:
    """Return ``"module:QualName"`` for ``t``, checking it can be imported back."""
    path = _PATHS.get(t)
    if path is None:
        path = _PATHS[t] = _checked_path(t)
    return path


def _checked_path(t: type[Any]) -> str:
    what = f"an instance of {_type_name(t)}"
    if "<locals>" in t.__qualname__:
        raise _EncodeError(
            what,
            "the class is defined inside a function, so replay cannot import it again; "
            "move the class to module level.",
        )
    path = f"{t.__module__}:{t.__qualname__}"
    try:
        found = _resolve(path)
    except CodecError:
        found = None
    if found is not t:
        raise _EncodeError(
            what,
            f"replay could not import its class back as {path!r}; define the class at "
            "module level under its own name.",
        )
    return path


def _typed(tag: str, t: type[Any], v: Any) -> dict[str, Any]:
    return {TAG: tag, "type": _type_path(t), "v": v}


def _enum_tree(v: enum.Enum) -> dict[str, Any]:
    try:
        value = _tree(v.value)
    except _EncodeError as problem:
        problem.parts.append(".value")
        raise
    return _typed("enum", type(v), value)


def _dataclass_tree(v: Any) -> dict[str, Any]:
    _type_path(type(v))  # refuse an unimportable class before walking its fields
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(v):
        try:
            fields[field.name] = _tree(getattr(v, field.name))
        except _EncodeError as problem:
            problem.parts.append(f".{field.name}")
            raise
    return _typed("dataclass", type(v), fields)


def _pydantic_tree(v: Any) -> dict[str, Any]:
    _type_path(type(v))
    try:
        data = v.model_dump(mode="json")
    except Exception as err:
        what = f"an instance of {_type_name(type(v))}"
        raise _EncodeError(what, f"pydantic could not dump it: {err}") from err
    return _typed("pydantic", type(v), _tree(data))


# --- lone surrogates: where they are, found only once encoding has failed -----


def storable_text(text: str) -> str:
    """``text`` with each lone surrogate written out as its escape (``\\udcff``),
    so that any store can hold it: for text cairn records about a value rather
    than the value itself (an error message, a traceback). O(1) for ASCII."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def refuse_surrogates(text: str, value: Any, what: str) -> None:
    """Raise ``CodecError`` naming ``what`` and where in ``value`` if ``text``
    (the stored form of ``value``) holds a lone surrogate, which no store can
    write. O(1) for ASCII."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CodecError(f"{what}: {_surrogate_message(value)}") from None


_SURROGATE_ADVICE = (
    "such text is not valid Unicode, so it cannot be stored. It usually comes from "
    "bytes decoded with errors='surrogateescape' or from half of a UTF-16 pair. Clean "
    "it before recording it: text.encode('utf-8', 'replace').decode('utf-8') puts "
    "'?' in its place, or record the raw bytes instead: text.encode('utf-8', "
    "'surrogatepass')."
)


def _surrogate_message(value: Any) -> str:
    found = _find_surrogate(value, "$")
    if found is None:  # not where the walk looks: point at the whole value
        return f"cannot record text holding a lone surrogate (found at $): {_SURROGATE_ADVICE}"
    path, text, position = found
    start = max(0, position - 20)
    around = text[start : position + 20]
    where = "" if len(text) == len(around) else f" of {len(text)} characters, around {around!r}"
    shown = repr(text) if not where else f"text{where}"
    return (
        f"cannot record text holding a lone surrogate ({text[position]!r} at position "
        f"{position} of {shown}, found at {path}): {_SURROGATE_ADVICE}"
    )


def _find_surrogate(v: Any, path: str) -> tuple[str, str, int] | None:
    """The path, text and position of the first lone surrogate in ``v``, walked
    as ``_tree`` walks it (paths read the same as in other encoding errors)."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, v, exc.start
        return None
    found: tuple[str, str, int] | None = None
    if isinstance(v, dict):
        for i, (key, x) in enumerate(v.items()):
            found = _find_surrogate(key, f"{path}.keys()[{i}]") or _find_surrogate(
                x, path + (_key_part(key) if type(key) is str else f"[{key!r}]")
            )
            if found:
                break
    elif isinstance(v, list | tuple):
        found = next(
            (f for i, x in enumerate(v) if (f := _find_surrogate(x, f"{path}[{i}]"))), None
        )
    elif isinstance(v, set | frozenset):
        found = next((f for x in v if (f := _find_surrogate(x, f"{path}[*]"))), None)
    elif isinstance(v, enum.Enum):
        found = _find_surrogate(v.value, f"{path}.value")
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        found = next(
            (
                f
                for field in dataclasses.fields(v)
                if (f := _find_surrogate(getattr(v, field.name), f"{path}.{field.name}"))
            ),
            None,
        )
    elif hasattr(type(v), "model_validate") and hasattr(v, "model_dump"):
        found = _find_surrogate(v.model_dump(mode="json"), path)
    return found


# --- decoding: JSON text -> value ---------------------------------------------


def _resolve(path: str) -> Any:
    """Import the object named ``"module:QualName"``."""
    module, _, qualname = path.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as err:
        raise CodecError(
            f"cannot import {path!r}, named in the record: the class moved or was renamed "
            "since the value was recorded. Make it importable at that path again (an "
            "alias is enough) to replay."
        ) from err
    return found


def _load_class(obj: dict[str, Any], fits: Callable[[type[Any]], bool]) -> Any:
    path = obj["type"]
    cls = _resolve(path)
    if not (isinstance(cls, type) and fits(cls)):
        raise CodecError(
            f"the record names {path!r} as a {obj[TAG]} class, but it is not one now; "
            "the code changed since the value was recorded."
        )
    return cls


def _enum_value(obj: dict[str, Any]) -> Any:
    return _load_class(obj, lambda c: issubclass(c, enum.Enum))(obj["v"])


def _dataclass_value(obj: dict[str, Any]) -> Any:
    cls = _load_class(obj, dataclasses.is_dataclass)
    data = obj["v"]
    fields = dataclasses.fields(cls)
    value = cls(**{f.name: data[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(value, f.name, data[f.name])
    return value


def _pydantic_value(obj: dict[str, Any]) -> Any:
    return _load_class(obj, lambda c: hasattr(c, "model_validate")).model_validate(obj["v"])


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "datetime": lambda o: datetime.fromisoformat(o["v"]),
    "date": lambda o: date.fromisoformat(o["v"]),
    "time": lambda o: time.fromisoformat(o["v"]),
    "timedelta": lambda o: timedelta(*o["v"]),
    "bytes": lambda o: base64.b64decode(o["v"], validate=True),
    "decimal": lambda o: Decimal(o["v"]),
    "uuid": lambda o: uuid.UUID(o["v"]),
    "tuple": lambda o: tuple(o["v"]),
    "set": lambda o: set(o["v"]),
    "frozenset": lambda o: frozenset(o["v"]),
    "dict": lambda o: dict(o["v"]),
    "enum": _enum_value,
    "dataclass": _dataclass_value,
    "pydantic": _pydantic_value,
}


def _untag(obj: dict[str, Any]) -> Any:
    """``object_hook``: called bottom-up, so tagged items arrive already decoded."""
    if TAG not in obj:
        return obj
    tag = obj[TAG]
    decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
    if decoder is None:
        raise CodecError(
            f"cannot decode the record: unknown tag {tag!r} (written by a newer cairn?)."
        )
    try:
        return decoder(obj)
    except CodecError:
        raise
    except Exception as err:
        where = f" of {obj['type']!r}" if "type" in obj else ""
        raise CodecError(
            f"cannot rebuild a recorded {tag} value{where}: {type(err).__name__}: {err}"
        ) from err


_PLAIN_DECODER = json.JSONDecoder().decode
_TAGGED_DECODER = json.JSONDecoder(object_hook=_untag).decode
