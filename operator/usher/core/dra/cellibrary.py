"""The Kubernetes CEL libraries that cel-expr-python lacks, written here as custom functions. Pure.

What the library does not provide, kube-scheduler's environment has, and a
Python function can return (see :mod:`usher.core.dra.cel` for the whole list):

- Kubernetes ``Lists``: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
  ``lastIndexOf``, ``includes``. Elements keep CEL's equality (``1 != true``,
  deep for lists and maps) and ordering (mixed kinds are "no such overload").
  ``indexOf`` and ``lastIndexOf`` of a list take any element (upstream wants
  the list's element type), as they join the strings extension's own.
- ``Regex``: ``find``, ``findAll``. Matching runs on the library's own RE2
  (its ``regex.replace``, in an environment of its own), so it is linear-time
  and has Go's semantics, empty matches included; only the functions' names
  are written here.
- ``URLs``, ``IP`` and ``CIDR`` (parsing in :mod:`usher.core.dra.celnet`). A
  value is a one-entry map like a quantity's: ``{"@url": text}``,
  ``{"@ip": canonical text}``, ``{"@cidr": "address/bits"}`` (the address
  canonical but not masked, as Go keeps it), so ``==`` compares IPs and CIDRs
  by value; URLs compare by their text (upstream by their re-encoded form).
- ``cel.@mapInsert``, the run-time half of ``transformMap`` and
  ``transformMapEntry``, which the library's two-variable comprehensions
  declare but do not register (a duplicate key is "insert failed"). It gets
  the map built so far as a Python dict, so it copies it (the cost estimate
  counts that), and a map value cannot be a duration or a timestamp.

A Python function's result goes back through a declared type, and a ``dyn``
one cannot carry a duration, a timestamp or an optional value. So one overload
per run-time kind carries the implementation: ``list<T>.min()`` is declared
for each T, typed, and one ``list<duration>`` overload, returning ``dyn``,
does the work for all of them (for durations it fails, saying why; timestamps
are not declared). ``uint`` elements come back as ``int`` (a ``sum()`` past
the int range is an overflow), and an empty list's ``sum()`` is the int ``0``
whatever its element type.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

from usher.core.dra import celnet

__all__ = ["BOXED", "check_pattern", "extension", "functions"]

IP_MARKER = "@ip"
CIDR_MARKER = "@cidr"
URL_MARKER = "@url"
_WHAT = {IP_MARKER: "an IP address", CIDR_MARKER: "a CIDR", URL_MARKER: "a URL"}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_T = cel.Type
BOXED = _T.Map(_T.STRING, _T.STRING)
"""The declared type of a boxed value (quantity, semver, IP, CIDR, URL)."""


def _unbox(value: Mapping[str, str], marker: str, function: str, role: str = "receiver") -> str:
    if marker not in value:
        raise ValueError(f"{function}: the {role} is not {_WHAT[marker]}")
    return value[marker]


# ------------------------------------------------------------------ lists


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str | bytes | datetime | timedelta):
        return type(value).__name__
    raise ValueError(f"no such overload: {type(value).__name__} is not comparable")


def _compare(left: Any, right: Any) -> int:
    if _kind(left) != _kind(right):
        raise ValueError(f"no such overload: cannot compare {_kind(left)} with {_kind(right)}")
    return int(left > right) - int(left < right)


def _equal(left: object, right: object) -> bool:
    """CEL equality: numbers compare across int/uint/double, bools are not numbers, lists and maps deeply."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_equal(left[key], right[key]) for key in left)
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right


def _is_sorted(values: Sequence[Any]) -> bool:
    return all(_compare(a, b) <= 0 for a, b in itertools.pairwise(values))


def _extreme(name: str, prefer: int) -> Callable[[Sequence[Any]], Any]:
    def extreme(values: Sequence[Any]) -> Any:
        if not values:
            raise ValueError(f"{name} called on empty list")
        result = values[0]
        for value in values[1:]:
            if _compare(result, value) == prefer:
                result = value
        return _returnable(name, result)

    return extreme


def _returnable(name: str, value: Any) -> Any:
    if isinstance(value, datetime | timedelta):
        raise ValueError(f"{name}: durations and timestamps are not supported by this implementation")
    return value


def _sum(values: Sequence[Any]) -> Any:
    kinds = {"double" if isinstance(v, float) else _kind(v) for v in values}
    if kinds - {"number", "double"} or len(kinds) > 1:
        _returnable("sum", values[0])
        raise ValueError("no such overload: sum needs numbers of one type")
    total = sum(values)
    if isinstance(total, int) and not _INT64_MIN <= total <= _INT64_MAX:  # a uint list's too: they arrive as ints
        raise ValueError("integer overflow")
    return total


def _index_of(values: Sequence[Any], item: Any) -> int:
    return next((i for i, value in enumerate(values) if _equal(value, item)), -1)


def _last_index_of(values: Sequence[Any], item: Any) -> int:
    return next((i for i in range(len(values) - 1, -1, -1) if _equal(values[i], item)), -1)


def _includes(target: Any, item: Any) -> bool:
    return any(_equal(v, item) for v in target) if isinstance(target, list) else _equal(target, item)


# ------------------------------------------------------------------ regex, on the library's RE2


@functools.cache
def _replace_program() -> Any:
    yaml = 'extensions:\n  - name: "regex"\n'
    variables = {"s": _T.STRING, "p": _T.STRING, "r": _T.STRING, "n": _T.INT}
    environment = cel.NewEnv(
        config=cel.NewEnvConfigFromYaml(yaml), variables=variables, extensions=[ext_optional.ExtOptional()]
    )
    return environment.compile("regex.replace(s, p, r, n)")


def _matches(text: str, pattern: str, limit: int) -> list[str]:
    """Go's ``FindAllString(text, limit)``: RE2's global replace has the same rule for empty matches."""
    marks = (c for c in map(chr, range(0xE000, 0xF900)) if c not in text)  # private-use: absent from the text
    start, end = next(marks), next(marks)
    result = _replace_program().eval(data={"s": text, "p": pattern, "r": f"{start}\\0{end}", "n": max(limit, -1)})
    if result.type() == cel.Type.ERROR:
        raise ValueError(f"Illegal regex: {str(result.value()).partition(': ')[2] or result.value()}")
    replaced: str = result.value()  # the text with each match written as start + match + end
    return [piece.partition(end)[0] for piece in replaced.split(start)[1:]]


def check_pattern(pattern: str) -> None:
    """Raise ValueError (``Illegal regex: ...``) if RE2 refuses ``pattern``."""
    _matches("", pattern, -1)


def _find(text: str, pattern: str) -> str:
    return next(iter(_matches(text, pattern, 1)), "")


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    return _matches(text, pattern, limit) if limit else []


# ------------------------------------------------------------------ URLs, IP addresses, CIDRs


def _url(text: str) -> dict[str, str]:
    try:
        celnet.parse_url(text, request_uri=True)
        celnet.parse_url(text)
    except ValueError as exc:
        raise ValueError(f"URL parse error during conversion from string: {exc}") from None
    return {URL_MARKER: text}


def _is_url(text: str) -> bool:
    try:
        celnet.parse_url(text, request_uri=True)
    except ValueError:
        return False
    return True


def _url_part(function: str, attribute: str) -> Callable[[Mapping[str, str]], Any]:
    return lambda value: getattr(celnet.parse_url(_unbox(value, URL_MARKER, function)), attribute)


def _address(value: Mapping[str, str], function: str, role: str = "receiver") -> celnet.Address:
    return celnet.parse_ip(_unbox(value, IP_MARKER, function, role))


def _ip(text: str) -> dict[str, str]:
    return {IP_MARKER: str(celnet.parse_ip(text))}


def _succeeds(parse: Callable[[str], object]) -> Callable[[str], bool]:
    def succeeds(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True

    return succeeds


def _ip_predicate(function: str, predicate: Callable[[celnet.Address], bool]) -> Callable[[Mapping[str, str]], bool]:
    return lambda value: predicate(_address(value, function))


def _prefix(value: Mapping[str, str], function: str, role: str = "receiver") -> tuple[celnet.Address, int]:
    return celnet.parse_cidr(_unbox(value, CIDR_MARKER, function, role))


def _cidr(text: str) -> dict[str, str]:
    address, bits = celnet.parse_cidr(text)
    return {CIDR_MARKER: f"{address}/{bits}"}


def _contains_ip(value: Mapping[str, str], other: str | Mapping[str, str]) -> bool:
    address, bits = _prefix(value, "containsIP")
    ip = celnet.parse_ip(other) if isinstance(other, str) else _address(other, "containsIP", "argument")
    return ip.version == address.version and ip in celnet.network(address, bits)


def _contains_cidr(value: Mapping[str, str], other: str | Mapping[str, str]) -> bool:
    address, bits = _prefix(value, "containsCIDR")
    inner, inner_bits = (
        celnet.parse_cidr(other) if isinstance(other, str) else _prefix(other, "containsCIDR", "argument")
    )
    return inner.version == address.version and bits <= inner_bits and inner in celnet.network(address, bits)


def _masked(value: Mapping[str, str]) -> dict[str, str]:
    address, bits = _prefix(value, "masked")
    return {CIDR_MARKER: str(celnet.network(address, bits))}


def _to_string(value: Mapping[str, str]) -> str:
    for marker in (IP_MARKER, CIDR_MARKER):
        if marker in value:
            return value[marker]
    raise ValueError("string: no such overload: only an IP address or a CIDR converts to a string")


# ------------------------------------------------------------------ cel.@mapInsert


def _insert(target: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
    if isinstance(value, datetime | timedelta):
        raise ValueError("transformMap: durations and timestamps as values are not supported by this implementation")
    for existing in target:
        if _equal(existing, key):
            shown = str(key).lower() if isinstance(key, bool) else key
            raise ValueError(f"insert failed: key {shown} already exists")
        if existing == key:  # Python merges true with 1; CEL keeps them apart
            raise ValueError("insert failed: this implementation cannot mix bool and number keys")
    return {**target, key: value}


def _insert_entries(target: dict[Any, Any], entries: dict[Any, Any]) -> dict[Any, Any]:
    for key, value in entries.items():
        target = _insert(target, key, value)
    return target


# ------------------------------------------------------------------ declarations


def _declare(name: str, result: Any, impl: Callable[..., Any], *signatures: list[Any], member: bool = False) -> Any:
    """One overload per signature, each carrying ``impl`` (their run-time kinds must differ)."""
    overloads = [
        cel.Overload(f"k8s_{name}_{i}", return_type=result, parameters=parameters, is_member=member, impl=impl)
        for i, parameters in enumerate(signatures)
    ]
    return cel.FunctionDecl(name, overloads)


def _per_element(name: str, elements: Sequence[Any], impl: Callable[..., Any], result: Any = None) -> Any:
    """``list<T>.name()`` for each T in ``elements``, typed; a ``list<duration>`` overload carries ``impl`` for all."""
    overloads = [
        cel.Overload(f"k8s_{name}_{i}", return_type=result or element, parameters=[_T.List(element)], is_member=True)
        for i, element in enumerate(elements)
    ]
    carrier = cel.Overload(
        f"k8s_{name}_run", return_type=result or _T.DYN, parameters=[_T.List(_T.DURATION)], is_member=True, impl=impl
    )
    return cel.FunctionDecl(name, [*overloads, carrier])


def functions() -> list[Any]:
    """The declarations of the functions above whose names the library does not already have."""
    string, boolean, integer, strings = _T.STRING, _T.BOOL, _T.INT, _T.List(_T.STRING)
    comparable = (_T.INT, _T.UINT, _T.DOUBLE, _T.BOOL, _T.STRING, _T.BYTES, _T.TIMESTAMP)
    returnable = (_T.INT, _T.UINT, _T.DOUBLE, _T.BOOL, _T.STRING, _T.BYTES)
    url_parts = {"getScheme": "scheme", "getHost": "host", "getHostname": "hostname", "getPort": "port"}
    return [
        _per_element("isSorted", comparable, _is_sorted, boolean),
        _per_element("sum", (_T.INT, _T.UINT, _T.DOUBLE), _sum),
        _per_element("min", returnable, _extreme("min", 1)),
        _per_element("max", returnable, _extreme("max", -1)),
        _declare("find", string, _find, [string, string], member=True),
        _declare("findAll", strings, _find_all, [string, string], [string, string, integer], member=True),
        _declare("url", BOXED, _url, [string]),
        _declare("isURL", boolean, _is_url, [string]),
        *(_declare(f, string, _url_part(f, a), [BOXED], member=True) for f, a in url_parts.items()),
        _declare("getEscapedPath", string, _url_part("getEscapedPath", "escaped_path"), [BOXED], member=True),
        _declare("getQuery", _T.Map(string, strings), _url_part("getQuery", "query"), [BOXED], member=True),
        cel.FunctionDecl(
            "ip",
            [
                cel.Overload("k8s_ip_string", return_type=BOXED, parameters=[string], impl=_ip),
                cel.Overload(
                    "k8s_cidr_ip",
                    return_type=BOXED,
                    parameters=[BOXED],
                    is_member=True,
                    impl=lambda v: {IP_MARKER: str(_prefix(v, "ip")[0])},
                ),
            ],
        ),
        _declare("isIP", boolean, _succeeds(celnet.parse_ip), [string]),
        _declare("ip.isCanonical", boolean, lambda text: str(celnet.parse_ip(text)) == text, [string]),
        _declare("family", integer, lambda v: _address(v, "family").version, [BOXED], member=True),
        *(
            _declare(name, boolean, _ip_predicate(name, predicate), [BOXED], member=True)
            for name, predicate in (
                ("isUnspecified", lambda a: a.is_unspecified),
                ("isLoopback", lambda a: a.is_loopback),
                ("isLinkLocalMulticast", celnet.is_link_local_multicast),
                ("isLinkLocalUnicast", lambda a: a.is_link_local),
                ("isGlobalUnicast", celnet.is_global_unicast),
            )
        ),
        _declare("cidr", BOXED, _cidr, [string]),
        _declare("isCIDR", boolean, _succeeds(celnet.parse_cidr), [string]),
        _declare("containsIP", boolean, _contains_ip, [BOXED, string], [BOXED, BOXED], member=True),
        _declare("containsCIDR", boolean, _contains_cidr, [BOXED, string], [BOXED, BOXED], member=True),
        _declare("prefixLength", integer, lambda v: _prefix(v, "prefixLength")[1], [BOXED], member=True),
        _declare("masked", BOXED, _masked, [BOXED], member=True),
    ]


def extension() -> Any:
    """Functions merged into the library's own names, and those taking ``dyn`` (only an extension dispatches it)."""
    any_list, dyn = _T.List(_T.DYN), _T.DYN
    # A key type no map of a selector has keeps this declaration apart from the library's own, map(A, B).
    carrier = _T.Map(_T.BOOL, _T.TIMESTAMP)
    map_insert = cel.FunctionDecl(
        "cel.@mapInsert",
        [
            cel.Overload("k8s_map_insert_entry", return_type=_T.MAP, parameters=[carrier, dyn, dyn], impl=_insert),
            cel.Overload("k8s_map_insert_map", return_type=_T.MAP, parameters=[carrier, carrier], impl=_insert_entries),
        ],
    )
    return cel.CelExtension(
        "usher.kubernetes",
        [
            _declare("string", _T.STRING, _to_string, [BOXED]),
            _declare("indexOf", _T.INT, _index_of, [any_list, dyn], member=True),
            _declare("lastIndexOf", _T.INT, _last_index_of, [any_list, dyn], member=True),
            _declare("includes", _T.BOOL, _includes, [dyn, dyn], member=True),  # dyn is run-time "any" only here
            map_insert,
        ],
    )
