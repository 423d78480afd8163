"""``slurm_hooks.core.record``: frozen records that behave as the frozen
dataclasses they replace on the hook path, and that the ``dataclasses``
module still accepts off it."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from slurm_hooks.core import record as rec
from slurm_hooks.core.record import field, record


@record
class Point:
    """Two required fields."""

    x: int
    y: int


@record
class Settings:
    name: str = "default"
    limit: float = 1.5
    tags: tuple[str, ...] = ()
    table: Mapping[str, Any] = field(default_factory=dict)
    bounded: int = field(default=3, metadata={"bounds": (0, 10)})
    kind: ClassVar[str] = "settings"


@record
class Nested:
    point: Point
    settings: Settings = field(default_factory=Settings)
    points: tuple[Point, ...] = ()


@record
class Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("value must be >= 0")


@record
class OwnRepr:
    value: int

    def __repr__(self) -> str:
        return f"<{self.value}>"


@record
class Sourced:
    value: int
    path: str | None = field(default=None, compare=False)


@record
class Base:
    a: int


@record
class Derived(Base):
    b: str = "b"


def test_positional_keyword_and_default_arguments() -> None:
    assert (Point(1, 2).x, Point(1, 2).y) == (1, 2)
    assert Point(y=2, x=1) == Point(1, 2)
    s = Settings()
    assert (s.name, s.limit, s.tags, s.bounded) == ("default", 1.5, (), 3)
    assert Settings(limit=2.0).limit == 2.0


def test_wrong_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError, match="missing"):
        Point(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, 2, z=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        Point(1, 2, x=3)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional arguments"):
        Point(1, 2, 3)  # type: ignore[call-arg]


def test_a_default_factory_makes_a_new_value_per_instance() -> None:
    a, b = Settings(), Settings()
    assert a.table == {} and b.table == {}
    assert a.table is not b.table
    assert Nested(Point(0, 0)).settings == Settings()


def test_class_variables_are_not_fields() -> None:
    assert [f.name for f in rec.fields(Settings)] == [
        "name",
        "limit",
        "tags",
        "table",
        "bounded",
    ]
    assert Settings.kind == "settings"
    assert Settings.name == "default"  # a plain default stays a class attribute
    assert not hasattr(Settings, "table")  # a factory's does not


def test_frozen_instances_refuse_assignment_as_dataclasses_do() -> None:
    p = Point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]
    assert p == Point(1, 2)


def test_equality_and_hash_follow_the_fields() -> None:
    assert Point(1, 2) == Point(1, 2)
    assert Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1, 2), Point(1, 2), Point(2, 1)}) == 2
    # Another class with the same values is not equal (as dataclasses).
    assert Base(1) != Derived(1)
    assert Point(1, 2) != (1, 2)


def test_a_field_left_out_of_comparison_is_still_shown() -> None:
    assert Sourced(1, "/a") == Sourced(1, "/b")
    assert hash(Sourced(1, "/a")) == hash(Sourced(1, None))
    assert Sourced(1) != Sourced(2)
    assert repr(Sourced(1, "/a")) == "Sourced(value=1, path='/a')"
    assert not dataclasses.fields(Sourced)[1].compare


def test_repr_names_the_class_and_each_field() -> None:
    assert repr(Point(1, 2)) == "Point(x=1, y=2)"
    assert repr(Settings(name="a", table={"k": 1})) == (
        "Settings(name='a', limit=1.5, tags=(), table={'k': 1}, bounded=3)"
    )
    assert repr(OwnRepr(3)) == "<3>"  # a method the class defines is kept


def test_post_init_runs_after_the_fields_are_set() -> None:
    assert Checked(1).value == 1
    with pytest.raises(ValueError, match=">= 0"):
        Checked(-1)


def test_fields_of_a_base_record_come_first() -> None:
    d = Derived(1)
    assert (d.a, d.b) == (1, "b")
    assert repr(d) == "Derived(a=1, b='b')"
    assert [f.name for f in rec.fields(Derived)] == ["a", "b"]


def test_a_required_field_after_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b'"):

        @record
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]


def test_replace_fields_and_asdict() -> None:
    s = Settings(name="a")
    t = rec.replace(s, limit=9.0)
    assert (t.name, t.limit) == ("a", 9.0)
    assert s.limit == 1.5
    with pytest.raises(TypeError, match="unexpected keyword"):
        rec.replace(s, nope=1)
    assert rec.fields(Settings)[4].metadata["bounds"] == (0, 10)
    assert rec.fields(Point(1, 2))[0].name == "x"
    n = Nested(Point(1, 2), points=(Point(3, 4),))
    assert rec.asdict(n) == {
        "point": {"x": 1, "y": 2},
        "settings": {
            "name": "default",
            "limit": 1.5,
            "tags": (),
            "table": {},
            "bounded": 3,
        },
        "points": ({"x": 3, "y": 4},),
    }


def test_is_record_and_table_classes() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        v: int = 0

    assert rec.is_record(Point) and rec.is_record(Point(1, 2))
    assert not rec.is_record(Plain)
    assert rec.is_table_class(Point) and rec.is_table_class(Plain)
    assert not rec.is_table_class(Point(1, 2)) and not rec.is_table_class(int)
    assert [f.name for f in rec.table_fields(Plain)] == ["v"]
    with pytest.raises(TypeError, match="not a record"):
        rec.fields(Plain)


def test_the_dataclasses_module_accepts_records() -> None:
    """Code off the hook path (config docs, reports, tests) keeps using
    ``dataclasses.fields``/``replace``/``asdict`` on these classes."""
    s = Settings(name="a")
    assert dataclasses.is_dataclass(Settings) and dataclasses.is_dataclass(s)
    fs = dataclasses.fields(Settings)
    assert [f.name for f in fs] == ["name", "limit", "tags", "table", "bounded"]
    assert fs[0].default == "default"
    assert fs[3].default_factory is dict
    assert fs[4].metadata["bounds"] == (0, 10)
    assert dataclasses.replace(s, limit=2.0) == Settings(name="a", limit=2.0)
    assert dataclasses.asdict(Nested(Point(1, 2)))["point"] == {"x": 1, "y": 2}


def test_pickle_and_copy_keep_value_and_type() -> None:
    n = Nested(Point(1, 2), points=(Point(3, 4),))
    for other in (pickle.loads(pickle.dumps(n)), copy.copy(n), copy.deepcopy(n)):
        assert other == n and type(other) is Nested
        with pytest.raises(dataclasses.FrozenInstanceError):
            other.point = Point(0, 0)  # type: ignore[misc]


def test_making_a_record_imports_no_dataclasses() -> None:
    """The point of the module: a record class and its instances cost no
    ``dataclasses``/``inspect`` import (and no ``exec``)."""
    code = (
        "import sys\n"
        "from slurm_hooks.core.record import record, field, replace, asdict\n"
        "@record\n"
        "class R:\n"
        "    a: int\n"
        "    b: tuple = field(default_factory=tuple)\n"
        "r = replace(R(1), a=2)\n"
        "assert r == R(2) and hash(R(1)) == hash(R(1)) and asdict(r) == {'a': 2, 'b': ()}\n"
        "print(sorted(m for m in ('dataclasses', 'inspect', 'ast', 'dis') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"
