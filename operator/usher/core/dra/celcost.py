"""A static, size-aware cost estimate of a compiled CEL selector, and the domains it names. Pure.

CEL-C++ (cel-expr-python) cannot be interrupted and has no memory limit, so a
selector is refused before it ever runs when its estimated cost exceeds the
limit, as the apiserver refuses them: a ``cel.bind`` chain that doubles a
string 30 times would otherwise take seconds and gigabytes. The estimate walks
the checked syntax tree (a protobuf, read here field by field) with an upper
bound on the size of every value of the ``device`` environment. The same walk
collects the attribute/capacity domains the expression looks up by a constant
name, so they can be made empty maps when a device lacks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ITERATION_BUDGET = 10_000
"""CEL-C++ stops an evaluation after this many comprehension iterations in all."""

# ------------------------------------------------------------------ static analysis of the syntax tree


@dataclass(frozen=True, slots=True)
class _Shape:
    """An upper bound on a value, for the cost estimate."""

    size: int
    """Bytes of a string, or entries of a list or map counted recursively; 1 for a scalar."""
    items: int = 0
    """Entries a comprehension can iterate over."""
    key: _Shape | None = None
    """An iterated entry (list element or map key); None: bounded by the size alone."""
    value: _Shape | None = None
    """An indexed entry (list element or map value); None: bounded by the size alone."""
    role: str = ""
    """``device``, ``domains`` (device.attributes or device.capacity), or "" for anything else."""


def _key(shape: _Shape) -> _Shape:
    return shape.key or _Shape(shape.size, shape.size)


def _member(shape: _Shape) -> _Shape:
    return shape.value or _Shape(shape.size, shape.size)


def _join(shapes: Iterable[_Shape]) -> _Shape:
    """The smallest bound covering all of ``shapes``."""
    shapes = list(shapes)
    if not shapes:
        return _Shape(0)
    roles = {s.role for s in shapes}
    keys = [s.key for s in shapes if s.key is not None]
    values = [s.value for s in shapes if s.value is not None]
    return _Shape(
        max(s.size for s in shapes),
        max(s.items for s in shapes),
        _join(keys) if len(keys) == len(shapes) else None,
        _join(values) if len(values) == len(shapes) else None,
        roles.pop() if len(roles) == 1 else "",
    )


# resource.k8s.io/v1 limits: 32 attributes and capacities per device, names of at most 63 bytes,
# string and version values of at most 64 bytes.
_SCALAR = _Shape(1)
_TEXT = _Shape(64)
_IDS = _Shape(32 * (64 + 64), 32, _TEXT, _TEXT)
_DOMAINS = _Shape(32 * 64 + _IDS.size, 32, _TEXT, _IDS, "domains")
_DEVICE = _Shape(2 * _DOMAINS.size + 64, 3, _TEXT, _DOMAINS, "device")
_DEVICE_FIELDS = {"driver": _TEXT, "attributes": _DOMAINS, "capacity": _DOMAINS}

_O1 = frozenset({"_[_]", "_?._", "_[?_]", "_&&_", "_||_", "!_", "_?_:_", "@not_strictly_false"})
"""Calls that cost one step whatever the size of their operands."""
_SCALAR_RESULT = frozenset(
    {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_&&_", "_||_", "!_", "-_", "_-_", "_*_", "_/_", "_%_", "@in"}
    | {"@not_strictly_false", "size", "contains", "startsWith", "endsWith", "matches", "indexOf", "lastIndexOf"}
    | {"int", "uint", "double", "bool", "type", "hasValue", "quantity", "isQuantity", "semver", "isSemver"}
    | {"compareTo", "isGreaterThan", "isLessThan", "add", "sub", "sign", "isInteger", "asInteger"}
    | {"asApproximateFloat", "major", "minor", "patch"}
)
"""Calls whose result is a scalar or a small quantity or semver."""
_SAME_SIZE = frozenset(
    {
        "lowerAscii",
        "upperAscii",
        "trim",
        "substring",
        "charAt",
        "reverse",
        "dyn",
        "string",
        "bytes",
        "value",
        "orValue",
        "or",
    }
)
"""Calls whose result is no bigger than their operands."""


def _fields(message: bytes) -> dict[int, list[Any]]:
    """Decode one protobuf message: field number -> values (ints, or bytes for length-delimited fields)."""
    fields: dict[int, list[Any]] = {}
    pos, end = 0, len(message)
    value: int | bytes
    while pos < end:
        key, pos = _varint(message, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _varint(message, pos)
        elif wire == 2:
            length, pos = _varint(message, pos)
            value, pos = message[pos : pos + length], pos + length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = message[pos : pos + width], pos + width
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        fields.setdefault(key >> 3, []).append(value)
    return fields


def _varint(message: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = message[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _string_constant(expr: bytes) -> str | None:
    constant = _fields(expr).get(3)
    strings = _fields(constant[0]).get(6) if constant else None
    return strings[0].decode() if strings else None


class _Estimate:
    """Walks a ``cel.expr.Expr`` tree (as serialized by the library) for a cost bound and the domains it names.

    The model follows Kubernetes' estimator in spirit: every node costs one,
    operations that scan or build strings and lists cost their operands' sizes,
    a comprehension costs its body times the entries of its range (at most the
    runtime budget), and sizes grow through ``+``, ``replace``, ``join`` and
    comprehensions, so a chain of doublings is seen for what it is.
    """

    def __init__(self) -> None:
        self.cost = 0
        self.domains: set[str] = set()

    def expr(self, expr: bytes, scope: Mapping[str, _Shape]) -> _Shape:
        self.cost += 1
        fields = _fields(expr)
        if 3 in fields:  # a constant: a string or bytes counts its length
            constant = _fields(fields[3][0])
            text = constant.get(6) or constant.get(7)
            return _Shape(len(text[0])) if text else _SCALAR
        if 4 in fields:
            name = _fields(fields[4][0])[1][0].decode()
            return scope.get(name) or (_DEVICE if name == "device" else _SCALAR)
        if 5 in fields:
            return self._select(_fields(fields[5][0]), scope)
        if 6 in fields:
            return self._call(_fields(fields[6][0]), scope)
        if 7 in fields:
            elements = [self.expr(e, scope) for e in _fields(fields[7][0]).get(1, [])]
            member = _join(elements)
            return _Shape(sum(e.size for e in elements) + len(elements), len(elements), member, member)
        if 8 in fields:
            return self._struct(_fields(fields[8][0]), scope)
        if 9 in fields:
            return self._comprehension(_fields(fields[9][0]), scope)
        return _SCALAR

    def _select(self, select: dict[int, list[Any]], scope: Mapping[str, _Shape]) -> _Shape:
        operand = self.expr(select[1][0], scope)
        field = select[2][0].decode()
        if select.get(3, [0])[0]:  # has(): a test, not an access
            return _SCALAR
        if operand.role == "device":
            return _DEVICE_FIELDS.get(field, _SCALAR)
        if operand.role == "domains":
            self.domains.add(field)
        return _member(operand)

    def _call(self, call: dict[int, list[Any]], scope: Mapping[str, _Shape]) -> _Shape:
        function = call[2][0].decode()
        arguments = call.get(1, []) + call.get(3, [])
        shapes = [self.expr(a, scope) for a in arguments]
        sizes = sum(s.size for s in shapes)
        self.cost += 1 if function in _O1 else sizes
        if function == "_[_]":
            key = _string_constant(arguments[1])
            if shapes[0].role == "domains" and key is not None:
                self.domains.add(key)
            return _member(shapes[0])
        if function in ("_?._", "_[?_]"):
            return _member(shapes[0])
        if function == "_?_:_":
            return _join(shapes[1:])
        if function in _SCALAR_RESULT:
            return _TEXT if function in ("quantity", "semver", "add", "sub") else _SCALAR
        if function in _SAME_SIZE:
            return _join(shapes)
        if function == "_+_":
            result = _Shape(sizes, sum(s.items for s in shapes))
        elif function == "replace" and len(shapes) >= 3:
            result = _Shape(shapes[0].size * (shapes[2].size + 1))
        elif function == "join":
            separator = shapes[1].size if len(shapes) > 1 else 0
            result = _Shape(shapes[0].size + shapes[0].items * separator)
        elif function == "split":
            result = _Shape(2 * shapes[0].size + 1, shapes[0].size + 1)
        else:  # format, and anything not listed: a generous linear bound
            result = _Shape(4 * sizes + 16, sum(s.items for s in shapes))
        self.cost += result.size
        return result

    def _struct(self, struct: dict[int, list[Any]], scope: Mapping[str, _Shape]) -> _Shape:
        keys, values = [], []
        for entry in map(_fields, struct.get(2, [])):
            keys.append(self.expr(entry[3][0], scope) if 3 in entry else _Shape(len(entry.get(2, [b""])[0])))
            values.append(self.expr(entry[4][0], scope) if 4 in entry else _SCALAR)
        size = sum(k.size + v.size for k, v in zip(keys, values, strict=True)) + len(keys)
        return _Shape(size, len(keys), _join(keys), _join(values))

    def _comprehension(self, loop: dict[int, list[Any]], scope: Mapping[str, _Shape]) -> _Shape:
        # Fields: 1 iter_var, 2 iter_range, 3 accu_var, 4 accu_init, 5 loop_condition, 6 loop_step,
        # 7 result, 8 iter_var2. cel.bind is one with an empty range: its body is the result.
        iter_var, accu_var, iter_var2 = (loop[n][0].decode() if n in loop else "" for n in (1, 3, 8))
        iterated = self.expr(loop[2][0], scope)
        initial = self.expr(loop[4][0], scope)
        inner = {**scope, iter_var: _key(iterated), accu_var: initial}
        if iter_var2:
            inner[iter_var2] = _member(iterated)
        before = self.cost
        step = initial
        for number in (5, 6):
            if number in loop:
                step = self.expr(loop[number][0], inner)
        iterations = min(iterated.items, ITERATION_BUDGET)
        self.cost = before + iterations * (self.cost - before)
        grown = _Shape(
            initial.size + iterations * max(0, step.size - initial.size),
            initial.items + iterations * max(0, step.items - initial.items),
        )
        return self.expr(loop[7][0], {**scope, accu_var: grown if iterations else initial})


def analyse(serialized: bytes) -> tuple[int, frozenset[str]]:
    """The estimated cost of a compiled expression and the domains it looks up by a constant name."""
    any_message = _fields(serialized)
    checked = any_message[1][0].endswith(b"CheckedExpr")
    expr = _fields(any_message[2][0])[4 if checked else 2][0]
    estimate = _Estimate()
    estimate.expr(expr, {})
    return estimate.cost, frozenset(estimate.domains)
