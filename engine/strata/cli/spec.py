"""Parsing the ``strata`` command line's text arguments: schema specs (``id BIGINT NOT NULL, ...``),
``KEY=VALUE`` options and ``--where`` conditions (bound to the table's schema)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from strata.cli.common import CliError
from strata.expressions import Predicate, col
from strata.expressions.literals import bind
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside parentheses and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_schema_spec(spec: str) -> list[DataField]:
    """'id BIGINT NOT NULL, name STRING, price DECIMAL(10,2)' -> fields with ids 0..n-1."""
    fields = []
    for i, column in enumerate(split_top_level(spec)):
        if not column:
            raise CliError(f"empty column in schema {spec!r}")
        pieces = column.split(None, 1)
        if len(pieces) != 2:
            raise CliError(f"column {column!r} needs a name and a type, e.g. 'id BIGINT'")
        name, type_text = pieces[0].strip("`\""), pieces[1]
        comment = None
        m = re.search(r"\s+COMMENT\s+'((?:[^']|'')*)'\s*$", type_text, flags=re.IGNORECASE)
        if m:
            comment, type_text = m.group(1).replace("''", "'"), type_text[: m.start()]
        try:
            dtype = DataType.parse(type_text)
        except ValueError as exc:
            raise CliError(f"column {name!r}: {exc}") from None
        fields.append(DataField(i, name, dtype, comment))
    return fields


def build_table_schema(spec: str, partition_keys: list[str], primary_keys: list[str],
                       options: dict[str, str], comment: str | None = None) -> TableSchema:
    """A schema-0 from a column spec; primary-key columns become NOT NULL."""
    fields = parse_schema_spec(spec)
    names = [f.name for f in fields]
    for key in primary_keys + partition_keys:
        if key not in names:
            raise CliError(f"key column {key!r} is not in the schema; columns are {names}")
    fields = [DataField(f.id, f.name, f.type.not_null(), f.description) if f.name in primary_keys else f
              for f in fields]
    return TableSchema(0, fields, partition_keys, primary_keys, options, comment)


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"option {pair!r} must be KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


def split_names(text: str | None) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()] if text else []


_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|<>|!=|==|=|<|>)|(?P<punct>[(),])
                        |(?P<word>[A-Za-z_][A-Za-z0-9_.]*|"[^"]+"|`[^`]+`)
                        |(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))""", re.VERBOSE)


_COMPARE = {"=": "__eq__", "==": "__eq__", "<>": "__ne__", "!=": "__ne__", "<": "__lt__",
            "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CliError(f"cannot parse --where at {text[pos:].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_where(text: str, schema: TableSchema) -> Predicate:
    """A conjunction of simple conditions -> a Predicate bound to `schema` (strata.expressions.literals.bind:
    literals convert to the column types as with the Python API; FilterError names a bad one)."""
    tokens = _tokens(text)
    pos = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        return tokens[pos + offset] if pos + offset < len(tokens) else ("end", "")

    def take() -> tuple[str, str]:
        nonlocal pos
        token = peek()
        if token[0] == "end":
            raise CliError(f"incomplete --where {text!r}")
        pos += 1
        return token

    def keyword(word: str) -> bool:
        kind, value = peek()
        return kind == "word" and value.upper() == word

    def expect(word: str) -> None:
        kind, value = take()
        if kind != "word" or value.upper() != word:
            raise CliError(f"expected {word} in --where {text!r}, got {value!r}")

    def literal(name: str) -> Any:
        """SQL's literal types: TRUE/FALSE, 'text', an integer, or an exact decimal."""
        kind, value = take()
        if kind == "word" and value.upper() in ("TRUE", "FALSE"):
            return value.upper() == "TRUE"
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            number = Decimal(value)
            return int(number) if number == number.to_integral_value() and "." not in value else number
        raise CliError(f"expected a literal for column {name!r} in --where, got {value!r}")

    predicates: list[Predicate] = []
    while True:
        kind, name = take()
        if kind != "word":
            raise CliError(f"expected a column name in --where {text!r}, got {name!r}")
        name = name.strip('`"')
        column = col(name)
        negate = False
        if keyword("NOT"):
            take()
            negate = True
        kind, value = peek()
        if kind == "op":
            if negate:
                raise CliError(f"unexpected NOT in --where {text!r}")
            take()
            pred = getattr(column, _COMPARE[value])(literal(name))
        elif keyword("BETWEEN"):
            take()
            low = literal(name)
            expect("AND")
            pred = column.between(low, literal(name))
        elif keyword("IN"):
            take()
            if take() != ("punct", "("):
                raise CliError(f"expected ( after IN in --where {text!r}")
            values = [literal(name)]
            while peek() == ("punct", ","):
                take()
                values.append(literal(name))
            if take() != ("punct", ")"):
                raise CliError(f"expected ) to close IN (...) in --where {text!r}")
            pred = column.isin(values)
        elif keyword("IS"):
            take()
            if keyword("NOT"):
                take()
                expect("NULL")
                pred = column.is_not_null()
            else:
                expect("NULL")
                pred = column.is_null()
        elif keyword("LIKE"):
            take()
            kind, pattern = take()
            body = pattern[1:-1].replace("''", "'") if kind == "str" else ""
            if kind != "str" or not body.endswith("%") or any(c in body[:-1] for c in "%_"):
                raise CliError(f"only prefix patterns like 'abc%' are supported by LIKE, got {pattern!r}")
            pred = column.startswith(body[:-1])
        else:
            raise CliError(f"expected an operator after {name!r} in --where {text!r}, got {value!r}")
        predicates.append(~pred if negate else pred)
        if peek()[0] == "end":
            break
        expect("AND")
    result = predicates[0]
    for p in predicates[1:]:
        result = result & p
    bound = bind(result, schema)
    assert bound is not None
    return bound
