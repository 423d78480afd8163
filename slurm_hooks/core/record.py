"""Frozen records whose methods are not compiled when the class is made.

``@dataclass`` writes ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``
and the frozen ``__setattr__``/``__delattr__`` of every class as source text
and compiles each with its own ``exec``: on Python 3.11 about 4.3 M
instructions (0.4 ms) per class, and importing ``dataclasses`` itself pulls
in ``inspect``, ``ast`` and ``dis`` (41 M).  A healthy hook builds some 20
such classes and nothing else, so half of its start-up went there (README,
"Performance").  :func:`record` gives the same behaviour from a few generic
closures over the class's field tuple: making a class costs a dictionary
walk, not a compilation.

Only what the hook path's classes use is here: frozen instances, field
defaults and default factories, ``metadata`` (the config's bounds), equality,
hashing, ``repr``, :func:`replace`, :func:`fields` and :func:`asdict`.
Everything else stays a dataclass.  A record still answers the
``dataclasses`` module (``dataclasses.fields``, ``replace``, ``asdict``,
``is_dataclass``) for the code off the hook path (config docs, tests): the
first read of ``__dataclass_fields__`` imports ``dataclasses`` and builds real
``Field`` objects once, from a throw-away dataclass of the same fields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

#: The name a record keeps its fields under (``dataclasses`` uses its own).
FIELDS_ATTR = "__record_fields__"


class _Missing:
    """No default (``dataclasses.MISSING`` without importing dataclasses)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


class Field:
    """One field of a record: what ``dataclasses.Field`` says of it that
    our callers read (``name``, ``type``, ``default``, ``default_factory``,
    ``metadata``, ``init``)."""

    __slots__ = ("name", "type", "default", "default_factory", "metadata", "init", "compare")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        metadata: Mapping[Any, Any] | None = None,
        compare: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.metadata: Mapping[Any, Any] = MappingProxyType(dict(metadata)) if metadata else _EMPTY
        self.init = True
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    metadata: Mapping[Any, Any] | None = None,
    compare: bool = True,
) -> Any:
    """A field with a default factory or metadata, or left out of equality
    and hashing (``compare=False``), as ``dataclasses.field``."""
    return Field(default, default_factory, metadata, compare)


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))


def _collect(cls: type) -> tuple[Field, ...]:
    """The class's fields in declaration order, base records' first."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get(FIELDS_ATTR, ()):
            found[f.name] = f
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_classvar(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        f.name = name
        f.type = annotation
        if isinstance(value, Field):
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        found[name] = f
    seen_default = False
    for f in found.values():
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default
    return tuple(found.values())


def _init(cls: type, fields_: tuple[Field, ...]) -> Callable[..., None]:
    names = tuple(f.name for f in fields_)
    known = frozenset(names)
    defaults = [(f.name, f.default, f.default_factory) for f in fields_]
    post_init = hasattr(cls, "__post_init__")
    qualname = cls.__qualname__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(
                f"{qualname}.__init__() takes {len(names) + 1} positional arguments "
                f"but {len(args) + 1} were given"
            )
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in known:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {key!r}")
            if key in values:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {key!r}")
            values[key] = value
        if len(values) < len(names):
            for name, default, factory in defaults:
                if name in values:
                    continue
                if default is not MISSING:
                    values[name] = default
                elif factory is not MISSING:
                    values[name] = factory()
                else:
                    raise TypeError(
                        f"{qualname}.__init__() missing 1 required positional argument: {name!r}"
                    )
        # Field order as declared (repr, asdict and pickling read __dict__).
        self.__dict__.update({name: values[name] for name in names})
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) == 0:
        return lambda obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    many: Callable[[Any], tuple[Any, ...]] = attrgetter(*names)
    return many


def _frozen_error(name: str) -> AttributeError:
    # The same class dataclasses raises, so ``except FrozenInstanceError``
    # keeps working; imported only on this (rare) path.
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(f"cannot assign to field {name!r}")


def _methods(cls: type, fields_: tuple[Field, ...]) -> dict[str, Any]:
    names = tuple(f.name for f in fields_)
    every = _values(names)
    values = _values(tuple(f.name for f in fields_ if f.compare))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(names, every(self), strict=True))
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise _frozen_error(name)

    def __delattr__(self: Any, name: str) -> None:
        raise _frozen_error(name)

    return {
        "__init__": _init(cls, fields_),
        "__repr__": __repr__,
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__setattr__": __setattr__,
        "__delattr__": __delattr__,
    }


class _DataclassFields:
    """``__dataclass_fields__`` of a record, built on first read, so that
    the ``dataclasses`` module's functions accept records off the hook path
    while the hook path never imports ``dataclasses``."""

    def __get__(self, obj: object, owner: type) -> dict[str, Any]:
        import dataclasses

        namespace: dict[str, Any] = {"__module__": owner.__module__, "__annotations__": {}}
        for f in fields(owner):
            namespace["__annotations__"][f.name] = f.type
            namespace[f.name] = dataclasses.field(
                default=f.default if f.default is not MISSING else dataclasses.MISSING,
                default_factory=(
                    f.default_factory if f.default_factory is not MISSING else dataclasses.MISSING
                ),
                metadata=dict(f.metadata) or None,
                compare=f.compare,
            )
        shadow: Any = dataclasses.dataclass(frozen=True)(type(owner.__name__, (), namespace))
        built: dict[str, Any] = shadow.__dataclass_fields__
        type.__setattr__(owner, "__dataclass_fields__", built)
        return built


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record of its annotated fields (as
    ``@dataclass(frozen=True)``).  Methods the class body defines itself
    are kept."""
    fields_ = _collect(cls)
    setattr(cls, FIELDS_ATTR, fields_)
    for name, method in _methods(cls, fields_).items():
        if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
            setattr(cls, name, method)
    type.__setattr__(cls, "__match_args__", tuple(f.name for f in fields_))
    type.__setattr__(cls, "__dataclass_fields__", _DataclassFields())
    return cls


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a record class or instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    return FIELDS_ATTR in cls.__dict__


def fields(obj: object) -> tuple[Field, ...]:
    """The fields of a record class or instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    found: tuple[Field, ...] | None = cls.__dict__.get(FIELDS_ATTR)
    if found is None:
        raise TypeError(f"{cls.__qualname__} is not a record")
    return found


def is_table_class(tp: object) -> bool:
    """Whether ``tp`` is a record class or a dataclass (what the config
    builds from a table), without importing ``dataclasses`` for a record."""
    if not isinstance(tp, type):
        return False
    return is_record(tp) or hasattr(tp, "__dataclass_fields__")


def table_fields(cls: type) -> tuple[Any, ...]:
    """The fields of a record class (:class:`Field`) or of a dataclass
    (``dataclasses.Field``, its module then already imported)."""
    if is_record(cls):
        return fields(cls)
    import dataclasses

    return dataclasses.fields(cls)


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the record ``obj`` with ``changes`` (as ``dataclasses.replace``)."""
    for f in fields(obj):
        if f.name not in changes:
            changes[f.name] = obj.__dict__[f.name]
    return obj.__class__(**changes)


def asdict(obj: object) -> dict[str, Any]:
    """The record ``obj`` as plain dicts and lists, recursively (as
    ``dataclasses.asdict``: records and dataclasses inside become dicts,
    lists and tuples are copied, mappings become dicts)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    if "dataclasses" in sys.modules and not isinstance(value, type):
        import dataclasses

        if dataclasses.is_dataclass(value):
            instance: Any = value
            return dataclasses.asdict(instance)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
