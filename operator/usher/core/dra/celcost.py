"""A static, size-aware cost estimate of a compiled CEL selector, and the domains it names. Pure.

CEL-C++ (cel-expr-python) cannot be interrupted and has no memory limit, so a
selector is refused before it ever runs when its estimated cost exceeds the
limit, as the apiserver refuses them: a ``cel.bind`` chain that doubles a
string 30 times would otherwise take seconds and gigabytes. The estimate walks
the checked syntax tree (a protobuf, read here field by field) with an upper
bound on the size of every value of the ``device`` environment. The same walk
collects the attribute/capacity domains the expression looks up by a constant
name, so they can be made empty maps when a device lacks them, and the constant
patterns of ``find`` and ``findAll``, so RE2 can check them when compiled.

The Kubernetes library functions are priced as upstream's estimator
(``library/cost.go``) does, in this model's units: list functions a traversal,
``find``/``findAll`` the string's length times the pattern's over four, the
``sets`` functions and ``distinct`` one operand times the other, IP and CIDR
accessors one step; ``lists.range(n)`` makes ``n`` entries, and as many as a
million when ``n`` is not a constant (so it is refused), and a
``transformMap``'s accumulated map is counted again at each step because each
insertion copies it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

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
_DEVICE = _Shape(2 * _DOMAINS.size + 65, 4, _TEXT, _DOMAINS, "device")
_DEVICE_FIELDS = {"driver": _TEXT, "allowMultipleAllocations": _SCALAR, "attributes": _DOMAINS, "capacity": _DOMAINS}
_UNBOUNDED_RANGE = 1_000_000
"""``lists.range(n)`` with an ``n`` known only at run time: as upstream, assume the worst (and refuse)."""

_O1 = frozenset({"_[_]", "_?._", "_[?_]", "_&&_", "_||_", "!_", "_?_:_", "@not_strictly_false"})
"""Calls that cost one step whatever the size of their operands."""
_SCALAR_RESULT = frozenset(
    {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_&&_", "_||_", "!_", "-_", "_-_", "_*_", "_/_", "_%_", "@in"}
    | {"@not_strictly_false", "size", "contains", "startsWith", "endsWith", "matches", "indexOf", "lastIndexOf"}
    | {"int", "uint", "double", "bool", "type", "hasValue", "quantity", "isQuantity", "semver", "isSemver"}
    | {"compareTo", "isGreaterThan", "isLessThan", "add", "sub", "sign", "isInteger", "asInteger"}
    | {"asApproximateFloat", "major", "minor", "patch"}
    | {"isSorted", "sum", "includes", "isURL", "isIP", "ip.isCanonical", "isCIDR", "containsIP", "containsCIDR"}
    | {"family", "isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast"}
    | {"prefixLength", "ip", "cidr", "masked", "sets.contains", "sets.equivalent", "sets.intersects"}
)
"""Calls whose result is a scalar or a small boxed value (quantity, semver, IP address, CIDR)."""
_BOXED_RESULT = frozenset({"quantity", "semver", "add", "sub", "ip", "cidr", "masked"})
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
        "find",
        "url",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "slice",
        "distinct",
        "sort",
        "@sortByAssociatedKeys",
    }
)
"""Calls whose result is no bigger than their operands."""
_PRODUCT_COST = frozenset({"sets.contains", "sets.equivalent", "sets.intersects", "distinct"})
"""Calls that compare every element of one operand with every element of another (or itself)."""


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


def _int_constant(expr: bytes) -> int | None:
    constant = _fields(expr).get(3)
    ints = _fields(constant[0]).get(3) if constant else None
    return ints[0] - (ints[0] >> 63 << 64) if ints else None  # a varint holds the two's complement


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
        self.patterns: set[str] = set()
        self.map_inserts = 0

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
        if function in _PRODUCT_COST:
            self.cost += shapes[0].size * max(1, shapes[-1].items)
        if function in ("find", "findAll") and len(shapes) >= 2:
            self.cost += (shapes[0].size + 1) * (shapes[1].size // 4 + 1)  # upstream: string length x regex length
            pattern = _string_constant(arguments[1])
            if pattern is not None:
                self.patterns.add(pattern)
        if function in _SCALAR_RESULT:
            return _TEXT if function in _BOXED_RESULT else _SCALAR
        if function in ("min", "max"):
            return _member(shapes[0])
        if function in _SAME_SIZE:
            return _join(shapes)
        if function == "_+_":
            result = _Shape(sizes, sum(s.items for s in shapes))
        elif function == "replace" and len(shapes) >= 3:
            result = _Shape(shapes[0].size * (shapes[2].size + 1))
        elif function == "join":
            separator = shapes[1].size if len(shapes) > 1 else 0
            result = _Shape(shapes[0].size + shapes[0].items * separator)
        elif function in ("split", "findAll", "getQuery"):
            result = _Shape(2 * shapes[0].size + 1, shapes[0].size + 1)
        elif function == "getEscapedPath":
            result = _Shape(3 * shapes[0].size)  # every byte may become %XX
        elif function == "flatten":
            result = _Shape(shapes[0].size, shapes[0].size)
        elif function == "lists.range":
            count = _int_constant(arguments[0])
            count = _UNBOUNDED_RANGE if count is None else max(0, count)
            result = _Shape(2 * count, count, _SCALAR, _SCALAR)
        elif function == "cel.@mapInsert":  # transformMap's step: the accumulated map grows by one entry
            self.map_inserts += 1
            result = _Shape(sizes + 1, shapes[0].items + max(1, sum(s.items for s in shapes[1:])))
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
        before, inserts = self.cost, self.map_inserts
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
        if self.map_inserts > inserts:  # each insert copies the map built so far (a Python function's arguments)
            self.cost += iterations * grown.size
        return self.expr(loop[7][0], {**scope, accu_var: grown if iterations else initial})


class Analysis(NamedTuple):
    """What the walk of a compiled expression found."""

    cost: int
    domains: frozenset[str]
    """The attribute/capacity domains it looks up by a constant name."""
    patterns: frozenset[str]
    """The constant regular expressions of its ``find`` and ``findAll`` calls (checked when compiled, as upstream)."""


def analyse(serialized: bytes) -> Analysis:
    """The estimated cost of a compiled expression, the domains it names and its constant regex patterns."""
    any_message = _fields(serialized)
    checked = any_message[1][0].endswith(b"CheckedExpr")
    expr = _fields(any_message[2][0])[4 if checked else 2][0]
    estimate = _Estimate()
    estimate.expr(expr, {})
    return Analysis(estimate.cost, frozenset(estimate.domains), frozenset(estimate.patterns))
