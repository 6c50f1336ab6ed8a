"""Tests for cairn.codec: values come back equal and of the same type."""

from __future__ import annotations

import enum
import json
import math
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field, make_dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.codec import Codec, JsonCodec, PickleCodec, codec_for, storable_text
from cairn.errors import CodecError, ConfigurationError

CODEC = JsonCodec()


class Colour(enum.Enum):
    RED = "red"
    PAIR = (1, 2)


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True)
class Point:
    x: int
    y: int
    label: str = "p"
    norm: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "norm", math.hypot(self.x, self.y))


@dataclass
class Visit:
    when: datetime
    where: Point
    tags: tuple[Any, ...]


@dataclass
class Computed:
    base: int
    extra: int = field(init=False)

    def __post_init__(self) -> None:
        self.extra = -1  # replaced on decode by the recorded value


class Order(pydantic.BaseModel):
    id: int
    when: datetime
    items: list[str]
    meta: dict[str, int] = {}


class Opaque:
    """A class JSON cannot record but pickle can."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lock_free = [n, n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n

    def __hash__(self) -> int:
        return hash(self.n)


def assert_identical(a: Any, b: Any) -> None:
    """Assert equal values, with equal types all the way down and dict order kept."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_identical(key, next(k for k in b if k == key))
            assert_identical(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_identical(x, y)
    elif isinstance(a, datetime | time):
        assert a.isoformat() == b.isoformat()
    elif isinstance(a, Decimal):
        assert str(a) == str(b)
    else:
        assert a == b


def round_trip(value: Any) -> Any:
    return CODEC.decode(CODEC.encode(value))


OFFSETS = st.integers(-86399, 86399).map(lambda s: timezone(timedelta(seconds=s)))
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.datetimes(timezones=OFFSETS)
)
KEYS = st.text() | st.sampled_from(["$cairn", "v", "type"])
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(KEYS, inner, max_size=4)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=20,
)


# A hang guard, not a measure: 300 examples took over the suite's 120 s at load 20.
@pytest.mark.timeout(900)
@settings(database=None, deadline=None, max_examples=300)
@given(VALUES)
def test_round_trip_property(value: Any) -> None:
    """Any nest of JSON values, tuples, bytes, Decimals and aware datetimes comes back
    identical, and encoding it twice gives the same text."""
    text = CODEC.encode(value)
    assert CODEC.encode(value) == text
    assert_identical(CODEC.decode(text), value)


def test_plain_values_are_ordinary_compact_json() -> None:
    """Plain JSON values encode to just their compact JSON text, non-ASCII unescaped."""
    assert CODEC.encode({"a": 1}) == '{"a":1}'
    assert CODEC.encode(3) == "3"
    assert CODEC.encode(None) == "null"
    assert CODEC.encode([1.5, True, "é"]) == '[1.5,true,"é"]'
    assert CODEC.encode({"b": [], "a": {}}) == '{"b":[],"a":{}}'


def stable_id(value: Any) -> str:
    """A test id that is the same in every process: a set's repr follows the
    string hash seed, which differs between pytest-xdist's workers."""
    if isinstance(value, set | frozenset):
        inner = ", ".join(sorted(repr(item) for item in value))
        return f"{type(value).__name__}({{{inner}}})"
    return repr(value)


@pytest.mark.parametrize(
    "value",
    [
        datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC),
        datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        date(2024, 2, 29),
        time(23, 59, 59, 999999),
        time(8, 0, tzinfo=timezone(timedelta(hours=-3))),
        timedelta(days=-3, seconds=7, microseconds=1),
        timedelta(microseconds=1),
        b"\x00\xffbytes",
        Decimal("3.14159265358979323846264338327950288"),
        Decimal("-0E+3"),
        (1, "a", (2.5, None)),
        (),
        {1, 2, 3},
        frozenset({"a", "b"}),
        set(),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        Colour.RED,
        Colour.PAIR,
        Level.HIGH,
        {(1, 2): "tuple key", None: 0, 2.5: b"x"},
        {frozenset({1}): {Level.LOW: date(2020, 1, 1)}},
    ],
    ids=stable_id,
)
def test_tagged_types_round_trip(value: Any) -> None:
    """Each supported non-JSON type comes back with the same type and value."""
    assert_identical(round_trip(value), value)


def test_datetime_keeps_its_offset() -> None:
    """An aware datetime comes back aware, with the same UTC offset."""
    tz = timezone(timedelta(hours=-7))
    back = round_trip(datetime(2024, 1, 2, 3, 4, tzinfo=tz))
    assert back.utcoffset() == timedelta(hours=-7)


def test_frozen_dataclass_round_trip() -> None:
    """A frozen dataclass, including its init=False field, comes back equal."""
    point = Point(3, 4, "a")
    back = round_trip(point)
    assert type(back) is Point
    assert back == point
    assert back.norm == 5.0


def test_init_false_field_takes_the_recorded_value() -> None:
    """Fields with init=False are restored from the record, not recomputed."""
    value = Computed(1)
    value.extra = 42
    assert round_trip(value).extra == 42


def test_nested_dataclass_in_list_in_dict() -> None:
    """Dataclasses nested in lists in dicts, holding other tagged types, come back."""
    when = datetime(2024, 1, 1, tzinfo=UTC)
    value = {"visits": [Visit(when, Point(1, 2), ("x", "y")), None]}
    back = round_trip(value)
    assert back == value
    assert type(back["visits"][0].where) is Point
    assert type(back["visits"][0].tags) is tuple


def test_pydantic_model_round_trip() -> None:
    """A pydantic model comes back as the same model type with equal fields."""
    order = Order(id=7, when=datetime(2024, 3, 1, tzinfo=UTC), items=["a"], meta={"$cairn": 1})
    back = round_trip({"order": order})["order"]
    assert type(back) is Order
    assert back == order


def test_user_dict_with_tag_key_is_escaped() -> None:
    """A user dict that looks like a tag is escaped and comes back as that dict."""
    fake = {"$cairn": "tuple", "v": [1, 2]}
    text = CODEC.encode(fake)
    assert json.loads(text)["$cairn"] == "dict"
    assert_identical(CODEC.decode(text), fake)


def test_int_dict_keys_stay_ints() -> None:
    """Dict keys that are ints come back as ints, not the strings JSON would make."""
    value = {1: "a", 2: {3: "b"}}
    assert_identical(round_trip(value), value)


def test_naive_datetime_is_refused_with_advice() -> None:
    """A naive datetime is a CodecError that says to use a tz-aware datetime."""
    with pytest.raises(CodecError) as caught:
        CODEC.encode({"when": datetime(2024, 1, 1)})
    message = str(caught.value)
    assert "naive datetime" in message
    assert "$.when" in message
    assert "datetime.now(timezone.utc)" in message


@pytest.mark.parametrize(
    "value",
    [
        datetime(2024, 1, 1, tzinfo=timezone(timedelta(microseconds=1))),
        time(1, 2, tzinfo=timezone(timedelta(seconds=5, microseconds=500))),
    ],
    ids=["datetime", "time"],
)
def test_fractional_second_offset_is_refused(value: Any) -> None:
    """A UTC offset with a fraction of a second is refused: it would not come back."""
    with pytest.raises(CodecError, match="offsets must be whole seconds"):
        CODEC.encode(value)


def test_whole_second_offset_round_trips() -> None:
    """A UTC offset with seconds (but no fraction) comes back exactly."""
    value = datetime(1900, 1, 1, tzinfo=timezone(timedelta(minutes=9, seconds=21)))
    assert_identical(round_trip(value), value)


def test_unencodable_value_names_type_and_path() -> None:
    """An unknown type is a CodecError naming the type, its path, and what to do."""
    lock = threading.Lock()
    value = {"items": [0, 1, 2, {"when": lock}]}
    with pytest.raises(CodecError) as caught:
        CODEC.encode(value)
    message = str(caught.value)
    lock_type = f"{type(lock).__module__}.{type(lock).__qualname__}"
    assert lock_type in message
    assert "$.items[3].when" in message
    assert "dataclass" in message
    assert "pydantic" in message
    assert "PickleCodec" in message


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"odd key": object()}, "$['odd key']"),
        ((1, [object()]), "$[1][0]"),
        ({1: object()}, "$[1]"),
        (Visit(datetime(2024, 1, 1, tzinfo=UTC), Point(1, 2), (object(),)), "$.tags[0]"),
        ({object}, "$[*]"),
    ],
    ids=["quoted-key", "tuple", "int-key", "dataclass-field", "set-item"],
)
def test_error_path_inside_containers(value: Any, path: str) -> None:
    """The error path follows odd keys, tuples, non-str keys, fields and set items."""
    with pytest.raises(CodecError, match=r"\(found at (.*)\)") as caught:
        CODEC.encode(value)
    assert f"(found at {path})" in str(caught.value)


def test_error_message_reads_after_a_step_prefix() -> None:
    """The message starts in lower case so that "step 'fetch': " can prefix it."""
    with pytest.raises(CodecError) as caught:
        CODEC.encode(object())
    assert str(caught.value).startswith("cannot record a value of type builtins.object")


def test_class_defined_in_function_is_refused() -> None:
    """A dataclass defined inside a function is refused at encode time."""

    @dataclass
    class Local:
        n: int

    with pytest.raises(CodecError, match="move the class to module level"):
        CODEC.encode([Local(1)])


def test_class_not_importable_by_name_is_refused() -> None:
    """A class that cannot be imported back by its own name is refused at encode time."""
    ghost = make_dataclass("Ghost", [("n", int)])
    with pytest.raises(CodecError, match="could not import its class back"):
        CODEC.encode(ghost(1))


def test_unimportable_path_on_decode() -> None:
    """A tag naming a class that no longer exists is a CodecError naming the path."""
    text = '{"$cairn":"dataclass","type":"nowhere.gone:Thing","v":{}}'
    with pytest.raises(CodecError) as caught:
        CODEC.decode(text)
    assert "'nowhere.gone:Thing'" in str(caught.value)
    assert "moved or was renamed" in str(caught.value)


def test_path_naming_a_non_class_is_refused() -> None:
    """A tag whose path names something that is not a class of that kind is refused."""
    text = '{"$cairn":"dataclass","type":"os:system","v":{"command":"true"}}'
    with pytest.raises(CodecError, match="not one now"):
        CODEC.decode(text)


def test_changed_dataclass_fields_are_a_codec_error() -> None:
    """A record whose fields no longer fit the class is a CodecError."""
    text = CODEC.encode(Point(1, 2)).replace('"x"', '"old_x"')
    with pytest.raises(CodecError, match="cannot rebuild a recorded dataclass"):
        CODEC.decode(text)


def test_unknown_tag_is_a_codec_error() -> None:
    """A tag this cairn does not know is a CodecError."""
    with pytest.raises(CodecError, match="unknown tag 'future'"):
        CODEC.decode('{"$cairn":"future","v":1}')


def test_invalid_json_decode() -> None:
    """Text that is not JSON is a CodecError chained from the JSON error."""
    with pytest.raises(CodecError, match="not valid JSON") as caught:
        CODEC.decode("{not json")
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(number: float) -> None:
    """NaN and infinities are a CodecError: JSON cannot hold them."""
    with pytest.raises(CodecError, match=r"found at \$\[0\]"):
        CODEC.encode([number])


def test_cycle_is_a_codec_error() -> None:
    """A value that contains itself is a CodecError, not a crash."""
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CodecError, match="contains itself"):
        CODEC.encode(loop)


def test_set_encoding_is_deterministic() -> None:
    """Equal sets encode to the same text whatever their iteration order."""
    first, second = {1, 9}, {9, 1}  # 1 and 9 share a slot: order differs
    assert list(first) != list(second)
    assert CODEC.encode(first) == CODEC.encode(second)
    assert CODEC.encode({"b", "c", "a"}) == '{"$cairn":"set","v":["a","b","c"]}'


def test_dict_order_is_kept() -> None:
    """Dict key order survives the round trip, so iteration on replay matches."""
    value = {"z": 1, "a": 2, 3: 4}
    assert list(round_trip(value)) == ["z", "a", 3]


def test_pickle_codec_round_trip() -> None:
    """PickleCodec records an object JSON cannot, as ASCII text, and gives it back."""
    codec = PickleCodec()
    value = {"obj": Opaque(5)}
    text = codec.encode(value)
    assert text.isascii()
    assert codec.decode(text) == value


def test_pickle_codec_errors() -> None:
    """PickleCodec turns unpicklable values and bad text into CodecError."""
    codec = PickleCodec()
    with pytest.raises(CodecError, match="cannot pickle"):
        codec.encode(threading.Lock())
    with pytest.raises(CodecError, match="cannot unpickle"):
        codec.decode("not base64!")


def test_importing_codec_does_not_import_pickle() -> None:
    """Importing cairn.codec leaves pickle unimported until PickleCodec is used."""
    code = "import sys, cairn.codec; print('pickle' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_codec_for_names() -> None:
    """codec_for gives the codec for each stored name, and the name matches;
    pickle only when the caller says it trusts it."""
    codecs: list[Codec] = [codec_for("json"), codec_for("pickle", trust_pickle=True)]
    assert isinstance(codecs[0], JsonCodec)
    assert isinstance(codecs[1], PickleCodec)
    assert [c.name for c in codecs] == ["json", "pickle"]
    with pytest.raises(CodecError, match="does not unpickle"):
        codec_for("pickle")


def test_codec_for_unknown_name() -> None:
    """An unknown codec name is a ConfigurationError that lists the known names."""
    with pytest.raises(ConfigurationError) as caught:
        codec_for("yaml")
    assert "'yaml'" in str(caught.value)
    assert "'json', 'pickle'" in str(caught.value)


# -- lone surrogates -----------------------------------------------------------------------

LONE = "\ud800"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("abc" + LONE, "$"),
        ({"reply": ["ok", "x" + LONE]}, "$.reply[1]"),
        ({"outer": {"k" + LONE: 1}}, "$.outer.keys()[0]"),
        ({1: "a" + LONE}, "$[1]"),
        (("a", {"b": "é" * 100 + LONE}), "$[1].b"),
        ({"tags": {"x" + LONE}}, "$.tags[*]"),
        (Point(1, 2, label="p" + LONE), "$.label"),
        (Order(id=1, when=datetime(2026, 5, 24, tzinfo=UTC), items=["i" + LONE]), "$.items[0]"),
        ({"$cairn": "x" + LONE}, "$['$cairn']"),
        ({"\ud83d\ude00": 1}, "$.keys()[0]"),
        ("\udc80", "$"),
    ],
    ids=[
        "str",
        "nested",
        "dict-key",
        "non-str-key",
        "tuple",
        "set",
        "dataclass",
        "pydantic",
        "reserved-key",
        "pair-written-as-escapes",
        "low-surrogate",
    ],
)
def test_a_lone_surrogate_anywhere_is_refused_saying_where_and_what_to_do(
    value: Any, path: str
) -> None:
    """Text holding a lone surrogate, in a string, a dict key or nested anywhere,
    is a CodecError at encode naming where it is, the character and its position,
    and how to clean it; the message itself holds no surrogate (it can be stored)."""
    with pytest.raises(CodecError) as refused:
        CODEC.encode(value)
    message = str(refused.value)
    assert "lone surrogate" in message
    assert f"found at {path})" in message
    assert "text.encode('utf-8', 'replace')" in message
    assert "'surrogatepass'" in message
    message.encode("utf-8")  # would raise if the message quoted the surrogate raw


def test_a_long_text_with_a_lone_surrogate_is_quoted_around_it() -> None:
    """In a long text, the message quotes the characters around the surrogate and
    its position, not the whole text."""
    text = "a" * 5000 + LONE + "b" * 5000
    with pytest.raises(CodecError) as refused:
        CODEC.encode({"doc": text})
    message = str(refused.value)
    assert "at position 5000 of text of 10001 characters" in message
    assert "'aaaaaaaaaaaaaaaaaaaa\\ud800bbbbbbbbbbbbbbbbbbb'" in message
    assert len(message) < 1000


@pytest.mark.parametrize(
    "value",
    ["naïve", "日本語", "emoji \U0001f600", {"ключ": ["значение", "\u00e9"]}],
    ids=["latin", "cjk", "astral", "cyrillic-key"],
)
def test_valid_unicode_is_recorded_as_before(value: Any) -> None:
    """Any valid Unicode text, characters outside the BMP included, is recorded as
    before; only lone surrogates are refused (a pair written as two escapes,
    "\\ud83d\\ude00", is two lone surrogates in a Python str)."""
    assert CODEC.decode(CODEC.encode(value)) == value


def test_pickle_codec_records_lone_surrogates() -> None:
    """PickleCodec records such text as it is (pickle keeps surrogates), so a user
    who needs them has a way."""
    codec = PickleCodec()
    assert codec.decode(codec.encode("abc" + LONE)) == "abc" + LONE


def test_storable_text_escapes_only_lone_surrogates() -> None:
    """storable_text writes each lone surrogate as its escape and leaves any other
    text, ASCII or not, as it is (the same object)."""
    assert storable_text("read b\udcff.txt") == "read b\\udcff.txt"
    for text in ("plain", "naïve 日本語 \U0001f600"):
        assert storable_text(text) is text
