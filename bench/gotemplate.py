"""The part of Go's text/template that scheduler_perf's workload templates use, in Python.

Why not Jinja or str.format: the templates under
``test/integration/scheduler_perf`` are Go templates (``{{.Index}}``,
``{{range ($numDevices | Int)}}``, ``{{if eq .class "x"}}``), and running
them unchanged is the point of executing the upstream files.

Supported: text and actions with ``{{- -}}`` trimming and ``{{/* */}}``
comments; fields of the data (``.Index``, ``.a.b``, ``.``), variables
(``$x := ...``, ``$x = ...``, ``$``), string, number, ``true``/``false``/``nil``
literals, parenthesised pipelines and ``|`` pipelines; ``if``/``else if``/
``else``, ``range`` (over an integer as Go 1.22 does, a list or a map, with
``$i :=`` or ``$i, $e :=``) and ``with``; the builtins ``and or not eq ne lt
le gt ge len index print``; and the functions the caller passes
(scheduler_perf's ``AddInt``, ``Mod``, ``JSON``...). A missing map key is Go's
"no value": false in conditions, ``<no value>`` when printed.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = ["MISSING", "TemplateError", "format_value", "render"]


class TemplateError(ValueError):
    """The template cannot be parsed or executed."""


class _Missing:
    """Go's invalid reflect.Value: what a missing map key yields."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<no value>"

    def __bool__(self) -> bool:
        return False


MISSING = _Missing()

Function = Callable[..., Any]

# --------------------------------------------------------------------------- values


def format_float(value: float) -> str:
    """A float64 as Go's ``%v`` prints it (shortest digits, ``%e`` from 1e+06 on): 3 -> "3", 1e6 -> "1e+06"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    normal = Decimal(repr(abs(value))).normalize()
    _, digit_tuple, power = normal.as_tuple()
    digits = "".join(map(str, digit_tuple))
    exponent = len(digits) - 1 + int(power)
    # strconv.FormatFloat(v, 'g', -1, 64): %e when the exponent is < -4 or >= 6 (shortest precision).
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return sign + whole + ("." + fraction if fraction else "")


def format_value(value: Any) -> str:
    """How text/template prints a value (``fmt.Fprint``)."""
    if value is MISSING:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{format_value(k)}:{format_value(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, Sequence):
        return "[" + " ".join(format_value(v) for v in value) + "]"
    return str(value)


def truth(value: Any) -> bool:
    """Go template truth: false, 0, nil, no value and empty strings or collections are false."""
    if value is MISSING or value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str | Mapping | Sequence):
        return len(value) > 0
    return True


# --------------------------------------------------------------------------- lexing

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<declare>:=)
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
  | (?P<variable>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
  | (?P<assign>=)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()|,])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def _tokens(action: str) -> list[_Token]:
    out: list[_Token] = []
    position = 0
    while position < len(action):
        match = _TOKEN.match(action, position)
        if match is None:
            raise TemplateError(f"unexpected {action[position:]!r} in action {{{{{action}}}}}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append(_Token(kind, match.group()))
        position = match.end()
    return out


# --------------------------------------------------------------------------- parse tree


@dataclass
class _Command:
    """One command of a pipeline: a function call or a single operand."""

    operands: list[Any]


@dataclass
class _Pipeline:
    declare: list[str] = field(default_factory=list)
    assign: bool = False
    commands: list[_Command] = field(default_factory=list)


@dataclass
class _Text:
    text: str


@dataclass
class _Action:
    pipeline: _Pipeline


@dataclass
class _Block:
    """if, range or with: a pipeline, a body and an else branch."""

    keyword: str
    pipeline: _Pipeline
    body: list[Any]
    otherwise: list[Any]


@dataclass(frozen=True)
class _Field:
    base: str | None  # None: the dot; otherwise a variable name ("$" or "$x")
    path: tuple[str, ...]


@dataclass(frozen=True)
class _Ident:
    name: str


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = self._split(text)
        self.position = 0

    @staticmethod
    def _split(text: str) -> list[tuple[str, str]]:
        """("text", t) and ("action", a) items, with ``{{-``/``-}}`` trimming applied."""
        items: list[tuple[str, str]] = []
        position = 0
        trim_next = False
        for match in _ACTION.finditer(text):
            chunk = text[position : match.start()]
            if trim_next:
                chunk = chunk.lstrip()
            if match.group(1):
                chunk = chunk.rstrip()
            items.append(("text", chunk))
            body = match.group(2).strip()
            if not (body.startswith("/*") and body.endswith("*/")):
                items.append(("action", body))
            trim_next = bool(match.group(3))
            position = match.end()
        tail = text[position:]
        items.append(("text", tail.lstrip() if trim_next else tail))
        return items

    def parse(self) -> list[Any]:
        nodes, stop = self._list()
        if stop is not None:
            raise TemplateError(f"unexpected {{{{{stop}}}}}")
        return nodes

    def _list(self) -> tuple[list[Any], str | None]:
        """Nodes up to an ``end``/``else`` (returned as the stop word) or the end of the template."""
        nodes: list[Any] = []
        while self.position < len(self.items):
            kind, body = self.items[self.position]
            self.position += 1
            if kind == "text":
                if body:
                    nodes.append(_Text(body))
                continue
            word = body.split(None, 1)[0] if body else ""
            if word in {"end", "else"}:
                return nodes, body
            if word in {"if", "range", "with"}:
                nodes.append(self._block(word, body[len(word) :]))
            elif word in {"define", "template", "block", "break", "continue"}:
                raise TemplateError(f"{{{{{word}}}}} is not supported")
            else:
                nodes.append(_Action(_pipeline(_tokens(body))))
        return nodes, None

    def _block(self, keyword: str, rest: str) -> _Block:
        pipeline = _pipeline(_tokens(rest))
        body, stop = self._list()
        otherwise: list[Any] = []
        if stop is None:
            raise TemplateError(f"{{{{{keyword}}}}} without {{{{end}}}}")
        if stop.startswith("else"):
            tail = stop[4:].strip()
            if tail.startswith("if") and keyword == "if":
                otherwise = [self._block("if", tail[2:])]
            elif tail:
                raise TemplateError(f"unsupported {{{{{stop}}}}}")
            else:
                otherwise, stop = self._list()
                if stop != "end":
                    raise TemplateError(f"{{{{{keyword}}}}} ... {{{{else}}}} without {{{{end}}}}")
        return _Block(keyword, pipeline, body, otherwise)


def _pipeline(tokens: list[_Token]) -> _Pipeline:
    pipeline = _Pipeline()
    # "$x :=", "$i, $e :=", "$x ="
    for i, token in enumerate(tokens):
        if token.kind in {"declare", "assign"}:
            names = [t.text for t in tokens[:i] if t.text != ","]
            if names and all(n.startswith("$") for n in names):
                pipeline.declare = names
                pipeline.assign = token.kind == "assign"
                tokens = tokens[i + 1 :]
            break
        if token.kind not in {"variable", "punct"} or (token.kind == "punct" and token.text != ","):
            break
    operands, rest = _commands(tokens, 0)
    if rest != len(tokens):
        raise TemplateError(f"unexpected {tokens[rest].text!r}")
    pipeline.commands = operands
    if not pipeline.commands:
        raise TemplateError("missing value for command")
    return pipeline


def _commands(tokens: list[_Token], position: int) -> tuple[list[_Command], int]:
    """Commands separated by ``|`` from ``position`` up to a ``)`` or the end."""
    commands: list[_Command] = []
    current: list[Any] = []
    while position < len(tokens):
        token = tokens[position]
        if token.text == ")":
            break
        if token.text == "|":
            if not current:
                raise TemplateError("missing command before |")
            commands.append(_Command(current))
            current = []
            position += 1
            continue
        if token.text == "(":
            inner, end = _commands(tokens, position + 1)
            if end >= len(tokens) or tokens[end].text != ")":
                raise TemplateError("unclosed (")
            current.append(_Pipeline(commands=inner))
            position = end + 1
            continue
        current.append(_operand(token))
        position += 1
    if current:
        commands.append(_Command(current))
    return commands, position


def _operand(token: _Token) -> Any:
    if token.kind == "string":
        return _unquote(token.text)
    if token.kind == "raw":
        return token.text[1:-1]
    if token.kind == "number":
        text = token.text
        if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", text):
            return int(text, 0)
        return float(text)
    if token.kind == "field":
        return _Field(None, tuple(p for p in token.text.split(".") if p))
    if token.kind == "variable":
        name, *path = token.text.split(".")
        return _Field(name, tuple(path))
    if token.kind == "ident":
        if token.text in {"true", "false"}:
            return token.text == "true"
        if token.text == "nil":
            return None
        return _Ident(token.text)
    raise TemplateError(f"unexpected {token.text!r}")


def _unquote(text: str) -> str:
    escapes = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}
    out: list[str] = []
    i = 1
    while i < len(text) - 1:
        char = text[i]
        if char == "\\":
            i += 1
            out.append(escapes.get(text[i], text[i]))
        else:
            out.append(char)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------- execution


def _compare(name: str) -> Function:
    def compare(a: Any, *others: Any) -> bool:
        if name == "eq":
            return any(a == b for b in others)
        if len(others) != 1:
            raise TemplateError(f"{name} takes two arguments")
        b = others[0]
        if name == "ne":
            return bool(a != b)
        try:
            return bool({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[name])
        except TypeError as exc:
            raise TemplateError(f"{name}: incompatible types for comparison: {a!r}, {b!r}") from exc

    return compare


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        item = item.get(key, MISSING) if isinstance(item, Mapping) else item[key]
    return item


BUILTINS: dict[str, Function] = {
    "not": lambda value: not truth(value),
    "len": len,
    "index": _index,
    "print": lambda *values: "".join(format_value(v) for v in values),
    **{name: _compare(name) for name in ("eq", "ne", "lt", "le", "gt", "ge")},
}


class _Scope:
    def __init__(self, variables: dict[str, Any], parent: _Scope | None = None) -> None:
        self.variables = variables
        self.parent = parent

    def get(self, name: str) -> Any:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.variables:
                return scope.variables[name]
            scope = scope.parent
        raise TemplateError(f"undefined variable {name}")

    def set(self, name: str, value: Any) -> None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.variables:
                scope.variables[name] = value
                return
            scope = scope.parent
        raise TemplateError(f"undefined variable {name}")


class _Executor:
    def __init__(self, functions: Mapping[str, Function]) -> None:
        self.functions = {**BUILTINS, **functions}

    def run(self, nodes: list[Any], dot: Any, scope: _Scope, out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Action):
                value = self.pipeline(node.pipeline, dot, scope)
                if not node.pipeline.declare:
                    out.append(format_value(value))
            else:
                self.block(node, dot, scope, out)

    def block(self, block: _Block, dot: Any, scope: _Scope, out: list[str]) -> None:
        inner = _Scope({}, scope)
        value = self.pipeline(block.pipeline, dot, inner)
        if block.keyword == "if":
            self.run(block.body if truth(value) else block.otherwise, dot, inner, out)
        elif block.keyword == "with":
            if truth(value):
                self.run(block.body, value, inner, out)
            else:
                self.run(block.otherwise, dot, inner, out)
        else:
            self.range(block, value, dot, inner, out)

    def range(self, block: _Block, value: Any, dot: Any, scope: _Scope, out: list[str]) -> None:
        if isinstance(value, bool) or value is MISSING or value is None:
            raise TemplateError(f"range can't iterate over {format_value(value)}")
        items: list[tuple[Any, Any]]
        if isinstance(value, int):
            items = [(i, i) for i in range(value)]
        elif isinstance(value, Mapping):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, Sequence) and not isinstance(value, str):
            items = list(enumerate(value))
        else:
            raise TemplateError(f"range can't iterate over {format_value(value)}")
        if not items:
            self.run(block.otherwise, dot, scope, out)
            return
        names = block.pipeline.declare
        for key, element in items:
            iteration = _Scope({}, scope)
            if len(names) == 1:
                iteration.variables[names[0]] = element
            elif len(names) == 2:
                iteration.variables[names[0]] = key
                iteration.variables[names[1]] = element
            self.run(block.body, element, iteration, out)

    def pipeline(self, pipeline: _Pipeline, dot: Any, scope: _Scope) -> Any:
        value: Any = MISSING
        for i, command in enumerate(pipeline.commands):
            value = self.command(command, dot, scope, value if i else None, piped=i > 0)
        if pipeline.declare:
            if pipeline.assign:
                scope.set(pipeline.declare[0], value)
            elif len(pipeline.declare) == 1:
                scope.variables[pipeline.declare[0]] = value
            # range's "$i, $e :=" is bound per iteration by `range`.
        return value

    def command(self, command: _Command, dot: Any, scope: _Scope, previous: Any, *, piped: bool) -> Any:
        first, *rest = command.operands
        if isinstance(first, _Ident):
            function = self.functions.get(first.name)
            if function is None:
                raise TemplateError(f'function "{first.name}" not defined')
            if first.name in {"and", "or"}:
                return self._logic(first.name, rest, dot, scope, previous, piped=piped)
            args = [self.operand(arg, dot, scope) for arg in rest]
            if piped:
                args.append(previous)
            try:
                return function(*args)
            except TemplateError:
                raise
            except Exception as exc:
                raise TemplateError(f"error calling {first.name}: {exc}") from exc
        if rest or piped:
            raise TemplateError(f"can't give argument to non-function {first!r}")
        return self.operand(first, dot, scope)

    def _logic(self, name: str, rest: list[Any], dot: Any, scope: _Scope, previous: Any, *, piped: bool) -> Any:
        """``and``/``or``: the first falsy/truthy argument (short-circuit), else the last."""
        arguments = [*rest, _Value(previous)] if piped else rest
        if not arguments:
            raise TemplateError(f"{name} needs at least one argument")
        value: Any = None
        for argument in arguments:
            value = argument.value if isinstance(argument, _Value) else self.operand(argument, dot, scope)
            if truth(value) == (name == "or"):
                return value
        return value

    def operand(self, operand: Any, dot: Any, scope: _Scope) -> Any:
        if isinstance(operand, _Pipeline):
            return self.pipeline(operand, dot, scope)
        if isinstance(operand, _Field):
            value = dot if operand.base is None else scope.get(operand.base)
            for name in operand.path:
                if isinstance(value, Mapping):
                    value = value.get(name, MISSING)
                elif value is MISSING or value is None:
                    raise TemplateError(f"nil pointer evaluating .{name}")
                else:
                    raise TemplateError(f"can't evaluate field {name} in {format_value(value)}")
            return value
        if isinstance(operand, _Ident):
            function = self.functions.get(operand.name)
            if function is None:
                raise TemplateError(f'function "{operand.name}" not defined')
            return function()
        return operand


@dataclass(frozen=True)
class _Value:
    value: Any


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> list[Any]:
    """A template's parse tree, parsed once: createPods renders one template per pod, and executing a tree
    never changes it."""
    return _Parser(text).parse()


def render(text: str, data: Any, functions: Mapping[str, Function] | None = None) -> str:
    """Execute the template ``text`` with ``data`` as dot (and ``$``); TemplateError when it fails."""
    nodes = _parsed(text)
    functions = {"and": lambda *a: a, "or": lambda *a: a, **(functions or {})}
    out: list[str] = []
    _Executor(functions).run(nodes, data, _Scope({"$": data}), out)
    return "".join(out)
