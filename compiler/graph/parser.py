"""Parse the printer's text form back into a Graph (print -> parse -> print is the identity).

Constants come from `params` (name -> array, as returned by printer.graph_params); every other
fact — ops, attributes, types, node names, output names — is in the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.errors import CompilerError
from compiler.graph.ir import Call, Const, Expr, Graph, Var, attrs_of
from compiler.tensor_type import SHORT_TO_DTYPE, TensorType

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#.*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<ref>[%@](?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_./\-]+))
  | (?P<float>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf\b|nan\b))
  | (?P<int>-?\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>->|[()\[\],=:{}])
    """,
    re.VERBOSE,
)


class ParseError(CompilerError):
    """The text is not a graph this printer could have produced."""


class _Line:
    """Tokens of one line with a cursor."""

    def __init__(self, text: str, lineno: int) -> None:
        self.lineno = lineno
        self.tokens: list[tuple[str, str]] = []
        self.comment: str | None = None
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise self.error(f"unexpected character {text[pos]!r}")
            pos = m.end()
            kind = m.lastgroup or ""
            if kind == "comment":
                self.comment = m.group()[1:].strip()
            elif kind != "ws":
                self.tokens.append((kind, m.group()))
        self.pos = 0

    def error(self, message: str) -> ParseError:
        return ParseError(f"line {self.lineno}: {message}")

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def next(self, kind: str | None = None, text: str | None = None) -> str:
        k, t = self.peek()
        if (kind and k != kind) or (text and t != text) or k == "end":
            raise self.error(f"expected {text or kind}, found {t or 'end of line'!r}")
        self.pos += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text:
            self.pos += 1
            return True
        return False

    def done(self) -> None:
        if self.pos != len(self.tokens):
            raise self.error(f"unexpected {self.peek()[1]!r}")


def _decode_name(token: str) -> str:
    return json.loads(token) if token.startswith('"') else token


def _ref_key(token: str) -> tuple[str, bool, str]:
    """(sigil, is_call_number, name): %0 is a call result, %"0" an input named 0."""
    sigil, rest = token[0], token[1:]
    return sigil, sigil == "%" and rest.isdigit(), _decode_name(rest)


def _parse_type(line: _Line) -> TensorType:
    short = line.next("ident")
    if short not in SHORT_TO_DTYPE:
        raise line.error(f"unknown dtype {short!r}")
    line.next(text="[")
    dims: list[int] = []
    while not line.accept("]"):
        if dims:
            line.next(text=",")
        dims.append(int(line.next("int")))
    return TensorType(tuple(dims), SHORT_TO_DTYPE[short])


def _parse_value(line: _Line) -> Any:
    kind, text = line.peek()
    if text == "[":
        line.next()
        items: list[Any] = []
        while not line.accept("]"):
            if items:
                line.next(text=",")
            items.append(_parse_value(line))
        return tuple(items)
    line.next()
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "string":
        return json.loads(text)
    if kind == "ident" and text == "none":
        return None
    raise line.error(f"bad attribute value {text!r}")


def _comment_name(comment: str | None) -> str:
    if not comment:
        return ""
    return json.loads(comment) if comment.startswith('"') else comment


def parse_graph(text: str, params: Mapping[str, np.ndarray]) -> Graph:
    lines = [
        _Line(raw, i + 1)
        for i, raw in enumerate(text.splitlines())
        if raw.strip() and not raw.lstrip().startswith("#")
    ]
    if not lines:
        raise ParseError("empty text")
    env: dict[tuple[str, bool, str], Expr] = {}

    def lookup(line: _Line, token: str) -> Expr:
        key = _ref_key(token)
        if key[0] == "@":
            if key not in env:
                if key[2] not in params:
                    raise line.error(f"no parameter named {key[2]!r}")
                env[key] = Const(key[2], np.asarray(params[key[2]]))
            return env[key]
        if key not in env:
            raise line.error(f"{token} is used before it is defined")
        return env[key]

    head = lines[0]
    head.next(text="def")
    head.next("ref")
    head.next(text="(")
    inputs: list[Var] = []
    while not head.accept(")"):
        if inputs:
            head.next(text=",")
        token = head.next("ref")
        head.next(text=":")
        var = Var(_ref_key(token)[2], _parse_type(head))
        env[_ref_key(token)] = var
        inputs.append(var)
    head.next(text="->")
    head.next(text="(")
    while not head.accept(")"):
        _parse_type(head)
        head.accept(",")
    head.next(text="{")
    head.done()

    outputs: list[Expr] = []
    names: list[str] = []
    for line in lines[1:]:
        text_ = line.peek()[1]
        if text_ == "return":
            line.next()
            line.next(text="(")
            while not line.accept(")"):
                if outputs:
                    line.next(text=",")
                outputs.append(lookup(line, line.next("ref")))
                line.next(text="as")
                names.append(json.loads(line.next("string")))
            line.done()
            continue
        if text_ == "}":
            break
        target = line.next("ref")
        line.next(text="=")
        op = line.next("ident")
        line.next(text="(")
        args: list[Expr] = []
        attrs: dict[str, Any] = {}
        while not line.accept(")"):
            if args or attrs:
                line.next(text=",")
            if line.peek()[0] == "ref":
                args.append(lookup(line, line.next()))
            else:
                key = line.next("ident")
                line.next(text="=")
                attrs[key] = _parse_value(line)
        line.next(text=":")
        out_type = _parse_type(line)
        line.done()
        env[_ref_key(target)] = Call(op, tuple(args), attrs_of(attrs), out_type, _comment_name(line.comment))
    return Graph(tuple(inputs), tuple(outputs), tuple(names))
