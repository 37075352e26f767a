"""CEL device selectors of Dynamic Resource Allocation, evaluated as kube-scheduler does. Pure.

A selector sees one ``device``: ``driver``, ``allowMultipleAllocations`` (a
bool, false unless the device sets it), ``attributes[domain][id]`` and
``capacity[domain][id]``. The result must be a bool; anything else, or any
error, raises :class:`CelError`. The environment is Kubernetes 1.37's (its
``StoredExpressions`` base environment plus the DRA ``device``), function by
function:

- From the library (CEL-C++): the core language; ``cel.bind``; optional types;
  the strings extension at version 2, the one Kubernetes pins (``charAt``,
  ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``,
  ``split``, ``substring``, ``trim``, ``join``, ``format``, ``strings.quote``);
  ``sets.contains``, ``sets.equivalent``, ``sets.intersects``; the lists
  extension at version 2, whose functions are cel-go's version 3 that
  Kubernetes pins (``slice``, ``flatten``, ``distinct``, ``reverse``, ``sort``,
  ``sortBy``, ``lists.range``); the two-variable ``all``, ``exists``,
  ``existsOne``, ``transformList``, ``transformMap`` and ``transformMapEntry``
  macros (the library forgets to register the run-time half of the last two,
  ``cel.@mapInsert``, which :mod:`usher.core.dra.cellibrary` supplies).
- Written here, as custom functions: ``quantity`` and ``semver`` (below);
  Kubernetes' Lists (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
  ``lastIndexOf`` of a list, ``includes``), Regex (``find``, ``findAll``, run
  on the library's RE2), URLs (``url``, ``isURL``, ``getScheme``, ``getHost``,
  ``getHostname``, ``getPort``, ``getEscapedPath``, ``getQuery``), IP
  (``ip``, ``isIP``, ``ip.isCanonical``, ``family``, ``isUnspecified``,
  ``isLoopback``, ``isLinkLocalMulticast``, ``isLinkLocalUnicast``,
  ``isGlobalUnicast``, ``string``) and CIDR (``cidr``, ``isCIDR``,
  ``containsIP``, ``containsCIDR``, ``ip``, ``prefixLength``, ``masked``,
  ``string``): see :mod:`usher.core.dra.cellibrary`.
- Missing: Kubernetes' Format library (``format.dns1123Label()`` and the like
  return optional values, which a Python function cannot produce); the
  ``net.IP``/``net.CIDR`` type names; cross-type numeric comparisons
  (``1 < 1.5``), which the CEL-C++ checker refuses; ext.Math is not in the
  Kubernetes environment, so not here either. Mixed-type list literals, which
  the apiserver refuses, are accepted.

The library is ``cel-expr-python`` (0.1.x), the official wrapper of CEL-C++, a
binary wheel. Measured on Python 3.11 with ``device.driver == "gpu.example.com"
&& device.attributes["gpu.example.com"].model == "a100" &&
device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0``,
this module does 180,000 evaluations a second on one device and 90,000 when
every evaluation has a new device. The Rust-based ``common-expression-language``
does 210,000 with one context and 64,000 with a context per device, the
pure-Python ``cel-python`` 3,100. Only ``cel-expr-python`` has ``cel.bind``, the
strings extension, optional types and a bound on comprehensions (10,000
iterations per evaluation); the other two run for as long as an expression asks.

The library has no custom value types, so the Kubernetes environment is built
from what it has:

- A Quantity, Semver, IP address, CIDR or URL is a one-entry map
  (``{"@quantity": "1073741824"}``, ``{"@semver": "1.2.3"}``, ``{"@ip":
  "10.0.0.1"}``, ``{"@cidr": "10.0.0.0/24"}``, ``{"@url": text}``) holding a
  canonical text, so ``==`` compares values (``quantity("1Gi") ==
  quantity("1024Mi")``) and ``<`` does not compile. They share one declared
  type, so giving one where another is expected fails when evaluated, naming
  what was expected, rather than when compiled.
- An unknown domain is an empty map: the domains an expression names
  (``device.attributes["x.io"]``, also through ``cel.bind``) are found in its
  syntax tree and, when a device lacks them, added to its maps as empty maps.
- Limits: at most 10 KiB of text; a size-aware static estimate of the cost, at
  most 1,000,000 (refused when compiled, like the apiserver does, so a
  ``cel.bind`` chain that doubles a string 30 times, or ``lists.range(n)`` of
  an ``n`` known only at run time, never runs); a constant ``find`` pattern RE2
  refuses is refused when compiled too; 10,000 comprehension iterations at run
  time; and a CPU-time limit per evaluation, after which the expression is
  refused from then on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeAlias

import semver
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from usher.core.dra import cellibrary
from usher.core.dra.celcost import analyse
from usher.core.dra.model import AttributeValue, Version
from usher.core.resources import parse_quantity

__all__ = ["AttributeValue", "CelError", "DeviceInput", "SelectorEvaluator", "Version"]

MAX_EXPRESSION_BYTES = 10 * 1024
"""Longer selectors are refused (resource.k8s.io ``CELSelectorExpressionMaxLength``)."""
COST_LIMIT = 1_000_000
"""Selectors whose estimated cost exceeds this are refused (``CELSelectorExpressionMaxCost``)."""

_INT64_MAX = 2**63 - 1


class CelError(Exception):
    """A selector that does not compile, fails at run time or does not give a bool; the message names why."""


@dataclass(frozen=True, slots=True)
class DeviceInput:
    """The ``device`` a selector sees. Treated as immutable: its CEL form is built once per device."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    """domain -> id -> value."""
    capacity: Mapping[str, Mapping[str, str]]
    """domain -> id -> quantity text (``"40Gi"``)."""
    allow_multiple_allocations: bool = False
    """``device.allowMultipleAllocations`` (resource.k8s.io/v1 ``Device.allowMultipleAllocations``, unset is false)."""


# ------------------------------------------------------------------ Quantity and Semver values

_QUANTITY = "@quantity"
_SEMVER = "@semver"
_CelMap: TypeAlias = dict[str, str]


def _quantity_of(amount: Decimal) -> _CelMap:
    # normalize() gives one text per value: 1Gi and 1024Mi both become "1073741824", 100 becomes "1E+2".
    return {_QUANTITY: str(amount.normalize()) if amount else "0"}


def _parse_quantity(text: str) -> Decimal:
    try:
        return parse_quantity(text)
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


def _quantity(text: str) -> _CelMap:
    return _quantity_of(_parse_quantity(text))


def _is_quantity(text: str) -> bool:
    try:
        _parse_quantity(text)
    except ValueError:
        return False
    return True


def _parse_semver(text: str, normalize: bool = False) -> semver.Version:
    if normalize:
        text = _normalized_semver(text)
    try:
        return semver.Version.parse(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid semver {text!r}") from exc


def _normalized_semver(text: str) -> str:
    """Kubernetes' lenient form: a ``v`` prefix, missing minor or patch and leading zeros are accepted."""
    text = text.removeprefix("v")
    cut = min((i for i in (text.find("-"), text.find("+")) if i >= 0), default=len(text))
    parts = text[:cut].split(".")
    parts += ["0"] * (3 - len(parts))
    return ".".join(p.lstrip("0") or "0" if p.isdigit() else p for p in parts) + text[cut:]


def _semver(text: str, normalize: bool = False) -> _CelMap:
    # Build metadata does not take part in comparisons or equality, so it is not kept.
    return {_SEMVER: str(_parse_semver(text, normalize).replace(build=None))}


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _parse_semver(text, normalize)
    except ValueError:
        return False
    return True


def _amount(value: Mapping[str, str], function: str) -> Decimal:
    if _QUANTITY not in value:
        raise ValueError(f"{function}: the receiver is not a quantity")
    return Decimal(value[_QUANTITY])


def _version(value: Mapping[str, str], function: str) -> semver.Version:
    if _SEMVER not in value:
        raise ValueError(f"{function}: the receiver is not a semver")
    return _parse_semver(value[_SEMVER])


def _compare(left: Mapping[str, str], right: Mapping[str, str]) -> int:
    """compareTo for two quantities or two semvers: -1, 0 or 1."""
    if _QUANTITY in left and _QUANTITY in right:
        a, b = Decimal(left[_QUANTITY]), Decimal(right[_QUANTITY])
        return (a > b) - (a < b)
    if _SEMVER in left and _SEMVER in right:
        return _parse_semver(left[_SEMVER]).compare(_parse_semver(right[_SEMVER]))
    raise ValueError("compareTo: no matching overload: both sides must be quantities or both semvers")


def _add(left: Mapping[str, str], right: Mapping[str, str] | int) -> _CelMap:
    other = right if isinstance(right, int) else _amount(right, "add")
    return _quantity_of(_amount(left, "add") + other)


def _sub(left: Mapping[str, str], right: Mapping[str, str] | int) -> _CelMap:
    other = right if isinstance(right, int) else _amount(right, "sub")
    return _quantity_of(_amount(left, "sub") - other)


def _sign(value: Mapping[str, str]) -> int:
    amount = _amount(value, "sign")
    return (amount > 0) - (amount < 0)


def _is_integer(value: Mapping[str, str]) -> bool:
    amount = _amount(value, "isInteger")
    return amount == amount.to_integral_value() and abs(amount) <= _INT64_MAX


def _as_integer(value: Mapping[str, str]) -> int:
    if not _is_integer(value):
        raise ValueError(f"asInteger: {value[_QUANTITY]} is not an integer of 64 bits")
    return int(_amount(value, "asInteger"))


def _as_approximate_float(value: Mapping[str, str]) -> float:
    return float(_amount(value, "asApproximateFloat"))


def _functions() -> list[Any]:
    boxed = cel.Type.Map(cel.Type.STRING, cel.Type.STRING)  # a quantity or a semver: see _QUANTITY
    string, boolean, integer = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT

    def declare(name: str, result: Any, impl: Callable[..., Any], *signatures: list[Any], member: bool = False) -> Any:
        overloads = [
            cel.Overload(
                f"usher_{name}_{len(parameters)}_{i}",
                return_type=result,
                parameters=parameters,
                is_member=member,
                impl=impl,
            )
            for i, parameters in enumerate(signatures)
        ]
        return cel.FunctionDecl(name, overloads)

    return [
        declare("quantity", boxed, _quantity, [string]),
        declare("isQuantity", boolean, _is_quantity, [string]),
        declare("semver", boxed, _semver, [string], [string, boolean]),
        declare("isSemver", boolean, _is_semver, [string], [string, boolean]),
        declare("compareTo", integer, _compare, [boxed, boxed], member=True),
        declare("isGreaterThan", boolean, lambda a, b: _compare(a, b) > 0, [boxed, boxed], member=True),
        declare("isLessThan", boolean, lambda a, b: _compare(a, b) < 0, [boxed, boxed], member=True),
        declare("add", boxed, _add, [boxed, boxed], [boxed, integer], member=True),
        declare("sub", boxed, _sub, [boxed, boxed], [boxed, integer], member=True),
        declare("sign", integer, _sign, [boxed], member=True),
        declare("isInteger", boolean, _is_integer, [boxed], member=True),
        declare("asInteger", integer, _as_integer, [boxed], member=True),
        declare("asApproximateFloat", cel.Type.DOUBLE, _as_approximate_float, [boxed], member=True),
        declare("major", integer, lambda v: _version(v, "major").major, [boxed], member=True),
        declare("minor", integer, lambda v: _version(v, "minor").minor, [boxed], member=True),
        declare("patch", integer, lambda v: _version(v, "patch").patch, [boxed], member=True),
    ]


_LIBRARY_EXTENSIONS = """\
extensions:
  - name: "sets"
  - name: "lists"
    version: 2
  - name: "two-var-comprehensions"
"""
"""The library's extensions named in its environment configuration (they have no Python class)."""


def _new_environment() -> Any:
    extensions = [
        ext_bindings.ExtBindings(),
        ext_strings.ExtStrings(version=2),  # the version Kubernetes pins: no string reverse()
        ext_optional.ExtOptional(),
        cellibrary.extension(),
    ]
    return cel.NewEnv(
        config=cel.NewEnvConfigFromYaml(_LIBRARY_EXTENSIONS),
        variables={"device": cel.Type.DYN},
        extensions=extensions,
        functions=_functions() + cellibrary.functions(),
    )


# ------------------------------------------------------------------ compiling and evaluating


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A cache entry: a program and the domains it names, or the error that refused it."""

    program: Any = None
    domains: frozenset[str] = frozenset()
    error: str = ""


def _compile(environment: Any, expression: str) -> _Compiled:
    """Compile and type-check one selector, then refuse it if its estimated cost is over the limit."""
    length = len(expression.encode())
    if length > MAX_EXPRESSION_BYTES:
        return _Compiled(error=f"expression is {length} bytes long, over the limit of {MAX_EXPRESSION_BYTES}")
    try:
        program = environment.compile(expression)
    except Exception as exc:  # the library raises RuntimeError with a status; anything else is as bad
        return _Compiled(error=f"compilation failed: {_message(exc)}")
    result = program.return_type()
    if result not in (cel.Type.BOOL, cel.Type.DYN):
        return _Compiled(error=f"must evaluate to bool, not {result.name().lower()}")
    try:
        cost, domains, patterns = analyse(program.serialize())
    except (KeyError, IndexError, ValueError) as exc:  # a tree this module does not know: refuse, do not guess
        return _Compiled(error=f"cannot estimate the cost of this expression ({type(exc).__name__}: {exc})")
    if cost > COST_LIMIT:
        return _Compiled(error=f"too expensive: the estimated cost {cost} exceeds the limit of {COST_LIMIT}")
    for pattern in patterns:
        try:
            cellibrary.check_pattern(pattern)
        except ValueError as exc:
            return _Compiled(error=f"compilation failed: {exc}")
    return _Compiled(program, domains)


def _message(error: object) -> str:
    """A library message without its status code, in Kubernetes' words where they differ."""
    text = str(error).removesuffix(" [INVALID_ARGUMENT]").removesuffix(" [INTERNAL]").removesuffix(" [CANCELLED]")
    code, colon, rest = text.partition(": ")
    if colon and code.isupper() and " " not in code:  # NOT_FOUND: ..., INVALID_ARGUMENT: ...
        text = rest
    return text.replace("Key not found in map : ", "no such key: ")


def _device_data(device: DeviceInput) -> dict[str, Any]:
    """The CEL form of a device: plain maps, with quantities and versions as their canonical maps."""
    attributes = {
        domain: {id_: _attribute(value) for id_, value in ids.items()} for domain, ids in device.attributes.items()
    }
    capacity: dict[str, dict[str, _CelMap]] = {}
    for domain, ids in device.capacity.items():
        capacity[domain] = {}
        for id_, text in ids.items():
            try:
                capacity[domain][id_] = _quantity(text)
            except ValueError as exc:
                raise CelError(f"device capacity {domain}/{id_}: {exc}") from exc
    return {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": attributes,
        "capacity": capacity,
    }


def _attribute(value: AttributeValue) -> Any:
    """An attribute's CEL value: a scalar, a semver map, or (DRAListTypeAttributes) a list of either."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, Version):
        return _version_value(value.text)
    if value.kind == "version":
        return [_version_value(str(v)) for v in value.values]
    return list(value.values)


def _version_value(text: str) -> _CelMap:
    try:
        return _semver(text)
    except ValueError:
        return {_SEMVER: text}  # compared, it fails naming the text


class SelectorEvaluator:
    """Compiles selectors once (cached by text, errors too) and evaluates them against devices.

    Not thread-safe. ``time_limit`` is CPU seconds per evaluation: CEL-C++
    cannot be interrupted, so the check comes after the evaluation, which then
    fails, and the expression is refused from then on (static cost and the
    iteration budget keep that evaluation itself bounded). ``cpu_clock`` reads
    the thread's CPU seconds (injected so tests need no slow expression).
    """

    def __init__(
        self, *, cache_size: int = 4096, time_limit: float = 0.1, cpu_clock: Callable[[], float] = time.thread_time
    ) -> None:
        self._environment = _new_environment()
        self._cache: dict[str, _Compiled] = {}
        self._cache_size = max(1, cache_size)
        self._time_limit = time_limit
        self._cpu_clock = cpu_clock
        self._device: DeviceInput | None = None
        self._data: dict[str, Any] = {}
        self._activations: dict[frozenset[str], Any] = {}

    def check(self, expression: str) -> None:
        """Compile ``expression`` (or find it compiled); raise :class:`CelError` if it cannot run."""
        compiled = self._compiled(expression)
        if compiled.error:
            raise CelError(compiled.error)

    def matches(self, expression: str, device: DeviceInput) -> bool:
        """Whether ``device`` satisfies the selector; any error raises :class:`CelError`."""
        compiled = self._compiled(expression)
        if compiled.error:
            raise CelError(compiled.error)
        activation = self._activation(device, compiled.domains)
        started = self._cpu_clock()
        try:
            result = compiled.program.eval(activation)
        except Exception as exc:  # budget exhausted, recursion limit, a value the library cannot convert
            raise CelError(f"evaluation failed: {_message(exc)}") from exc
        elapsed = self._cpu_clock() - started
        if elapsed > self._time_limit:
            error = f"evaluation took {elapsed:.3f}s of CPU, over the limit of {self._time_limit}s"
            self._cache[expression] = _Compiled(error=f"refused: an earlier {error}")
            raise CelError(error)
        value = result.value()
        if value is True or value is False:
            return bool(value)
        if result.type() == cel.Type.ERROR:
            raise CelError(f"evaluation failed: {_message(value)}")
        raise CelError(f"must evaluate to bool, not {result.type().name().lower()}")

    def _compiled(self, expression: str) -> _Compiled:
        # Cheap refusal before hashing a huge text into the cache: characters never outnumber bytes.
        if len(expression) > MAX_EXPRESSION_BYTES:
            raise CelError(f"expression is over the limit of {MAX_EXPRESSION_BYTES} bytes")
        compiled = self._cache.pop(expression, None)
        if compiled is None:
            compiled = _compile(self._environment, expression)
            if len(self._cache) >= self._cache_size:
                del self._cache[next(iter(self._cache))]  # least recently used: hits move to the end
        self._cache[expression] = compiled
        return compiled

    def _activation(self, device: DeviceInput, domains: frozenset[str]) -> Any:
        """The device's bindings, built once per device (the last one is kept) and per set of missing domains."""
        if device is not self._device:
            self._data = _device_data(device)
            self._device = device
            self._activations = {}
        missing = domains.difference(self._data["attributes"]).union(domains.difference(self._data["capacity"]))
        activation = self._activations.get(missing)
        if activation is None:
            data = self._data
            if missing:
                data = {
                    **data,
                    "attributes": {**{d: {} for d in missing}, **data["attributes"]},
                    "capacity": {**{d: {} for d in missing}, **data["capacity"]},
                }
            try:
                activation = self._environment.Activation({"device": data})
            except Exception as exc:  # e.g. an int attribute beyond 64 bits
                raise CelError(f"device cannot be given to CEL: {_message(exc)}") from exc
            self._activations[missing] = activation
        return activation
