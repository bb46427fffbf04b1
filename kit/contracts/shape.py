"""A small checker for the kit's file shapes, written as ``TypedDict`` classes.

The data stays plain dicts (the writers' key order, so the files' bytes, are theirs); a
``TypedDict`` says which keys matter and their types, and these two functions hold a value to it:

- ``problems(tp, value)``: every place ``value`` is not of type ``tp`` (a writer refuses to
  write a file with any: a bug in the kit, found by its tests, not a file a reader must survive);
- ``clean(tp, value, bad)``: a reader's copy of ``value`` that the renderers can trust: a
  wrong-typed field is removed (a container that is not optional: emptied), a wrong-typed
  item of a list or mapping is dropped, an object whose ``Required`` field is wrong-typed is
  dropped whole; each such place is appended to ``bad`` as a dotted path. A container field that
  is absent and not optional is filled in empty, so readers index it without checking.

Keys a shape does not declare are kept as they are and never checked: shapes are open, so a
file from a newer kit still reads. Types understood: str, int, float (any finite JSON number),
bool, None, Any, ``X | Y``, ``list[X]``, ``dict[str, X]`` and nested ``TypedDict`` classes.
"""
from __future__ import annotations

import math
import types
from typing import Any, NotRequired, Required, Union, get_args, get_origin, get_type_hints, is_typeddict

_hints_cache: dict[type, dict[str, Any]] = {}
_required_cache: dict[type, frozenset[str]] = {}


def hints(td: type) -> dict[str, Any]:
    if td not in _hints_cache:
        _hints_cache[td] = get_type_hints(td)  # Required/NotRequired stripped: ``required`` says which
    return _hints_cache[td]


def required(td: type) -> frozenset[str]:
    """The keys of ``td`` that must be there. Read from the annotations themselves: under
    ``from __future__ import annotations`` Python 3.11's ``__required_keys__`` misses a
    ``Required[...]`` written as a string (fixed in 3.12)."""
    if td not in _required_cache:
        keys = set()
        for k, t in get_type_hints(td, include_extras=True).items():
            o = get_origin(t)
            if o is Required or (o is not NotRequired and k in td.__required_keys__):
                keys.add(k)
        _required_cache[td] = frozenset(keys)
    return _required_cache[td]


def _alternatives(tp: Any) -> tuple[Any, ...]:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return (tp,)


def optional(tp: Any) -> bool:
    return type(None) in _alternatives(tp) or tp is Any


def _container(tp: Any) -> Any:
    """The empty value of a non-optional container type (None for anything else)."""
    if optional(tp):
        return None
    o = get_origin(tp)
    if o is list:
        return []
    if o is dict or is_typeddict(tp):
        return {}
    return None


def _scalar_ok(tp: Any, v: Any) -> bool:
    if tp is Any or tp is object:
        return True
    if tp is type(None):
        return v is None
    if tp is bool:
        return isinstance(v, bool)
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if tp is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if tp is str:
        return isinstance(v, str)
    raise TypeError(f"shape type {tp!r} is not one the checker knows")


def name(tp: Any) -> str:
    """How a message names a type: 'a string', 'a number or None', 'a list' ..."""
    words = {str: "a string", int: "a whole number", float: "a number", bool: "true or false",
             type(None): "None"}
    parts = []
    for a in _alternatives(tp):
        o = get_origin(a)
        parts.append(words.get(a) or ("a list" if o is list else "an object" if o is dict or is_typeddict(a)
                                      else "anything"))
    return " or ".join(parts)


def problems(tp: Any, value: Any, path: str = "") -> list[str]:
    """Where ``value`` is not of type ``tp``: 'path: want ..., got ...' lines (empty: it is)."""
    alts = _alternatives(tp)
    if len(alts) > 1:
        found = [problems(a, value, path) for a in alts]
        return [] if any(not f for f in found) else \
            [f"{path or '.'}: want {name(tp)}, got {type(value).__name__}"]
    o = get_origin(tp)
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path or '.'}: want an object, got {type(value).__name__}"]
        out = []
        for k, t in hints(tp).items():
            if k in value:
                out += problems(t, value[k], f"{path}.{k}" if path else k)
            elif k in required(tp) and not optional(t):
                out.append(f"{path}.{k}: missing" if path else f"{k}: missing")
        return out
    if o is list:
        if not isinstance(value, list):
            return [f"{path or '.'}: want a list, got {type(value).__name__}"]
        (item,) = get_args(tp)
        return [p for i, v in enumerate(value) for p in problems(item, v, f"{path}[{i}]")]
    if o is dict:
        if not isinstance(value, dict):
            return [f"{path or '.'}: want an object, got {type(value).__name__}"]
        _, item = get_args(tp)
        return [p for k, v in value.items() for p in problems(item, v, f"{path}.{k}" if path else str(k))]
    return [] if _scalar_ok(tp, value) else [f"{path or '.'}: want {name(tp)}, got {type(value).__name__}"]


class Invalid(Exception):
    """An object dropped whole: a Required field of the wrong type."""


def clean(tp: Any, value: Any, bad: list[str], path: str = "") -> Any:
    """``value`` as a reader keeps it (see the module doc); raises ``Invalid`` when the whole
    value cannot be kept (wrong type for a non-optional ``tp``, or a Required field wrong)."""
    if not problems(tp, value):
        return _fill(tp, value)
    alts = [a for a in _alternatives(tp) if a is not type(None)]
    # the one structured alternative the value has the container type of, cleaned inside
    for a in alts:
        o = get_origin(a)
        if (is_typeddict(a) or o is dict) and isinstance(value, dict) or o is list and isinstance(value, list):
            return _clean_container(a, value, bad, path)
    raise Invalid(path)


def _clean_container(tp: Any, value: Any, bad: list[str], path: str) -> Any:
    o = get_origin(tp)
    if o is list:
        (item,) = get_args(tp)
        out = []
        for i, v in enumerate(value):
            try:
                out.append(clean(item, v, bad, f"{path}[{i}]"))
            except Invalid:
                bad.append(f"{path}[{i}]")
        return out
    if o is dict:
        _, item = get_args(tp)
        kept = {}
        for k, v in value.items():
            p = f"{path}.{k}" if path else str(k)
            try:
                kept[k] = clean(item, v, bad, p)
            except Invalid:
                bad.append(p)
        return kept
    fields = hints(tp)
    out = dict(value)
    for k, t in fields.items():
        p = f"{path}.{k}" if path else k
        if k not in value:
            if k in required(tp) and not optional(t):
                raise Invalid(p)
            continue
        try:
            out[k] = clean(t, value[k], bad, p)
        except Invalid:
            if k in required(tp):
                raise Invalid(p) from None
            bad.append(p)
            empty = _container(t)
            if empty is None:
                del out[k]  # reads as absent: ``.get(k, default)`` gives the reader's default
            else:
                out[k] = empty
    return _fill(tp, out)


def _fill(tp: Any, value: Any) -> Any:
    """Absent non-optional container fields of every object in ``value`` filled in empty."""
    if isinstance(value, dict) and any(is_typeddict(a) for a in _alternatives(tp)):
        td = next(a for a in _alternatives(tp) if is_typeddict(a))
        out = None
        for k, t in hints(td).items():
            sub = value.get(k, None)
            if k not in value:
                empty = _container(t)
                if empty is None:
                    continue
                out = out if out is not None else dict(value)
                out[k] = _fill(t, empty)
            elif isinstance(sub, (dict, list)):
                filled = _fill(t, sub)
                if filled is not sub:
                    out = out if out is not None else dict(value)
                    out[k] = filled
        return value if out is None else out
    if isinstance(value, list):
        items = [a for a in _alternatives(tp) if get_origin(a) is list]
        if items:
            (item,) = get_args(items[0])
            new = [_fill(item, v) for v in value]
            return value if all(a is b for a, b in zip(new, value)) else new
    if isinstance(value, dict):
        maps = [a for a in _alternatives(tp) if get_origin(a) is dict]
        if maps:
            _, item = get_args(maps[0])
            new = {k: _fill(item, v) for k, v in value.items()}
            return value if all(new[k] is value[k] for k in value) else new
    return value



