"""A strict parser for Spark DDL column lists (``"name STRING, price DECIMAL(10,2)"``), without pyspark.

Schemas are checked where they are written (``HttpLookup(...)``, ``aiospark enrich --schema``), long
before a Spark session exists, so this parser stands in for Spark's. It accepts a subset of Spark's
grammar and refuses everything else: every schema it accepts, Spark parses to the same column names
and types (tests/cli/test_schema_ddl.py compares the two on tricky cases). What it accepts:

* columns separated by commas: ``name TYPE``, ``name: TYPE``, then optionally ``NOT NULL`` and
  ``COMMENT 'text'``;
* names: ``[A-Za-z_][A-Za-z0-9_]*`` or backquoted (`` `my col` ``, a backquote doubled inside);
* types: BOOLEAN, TINYINT/BYTE, SMALLINT/SHORT, INT/INTEGER, BIGINT/LONG, FLOAT/REAL, DOUBLE,
  STRING, CHAR(n), CHARACTER(n), VARCHAR(n), DECIMAL/DEC/NUMERIC[(p[,s])], DATE, TIMESTAMP,
  TIMESTAMP_NTZ, TIMESTAMP_LTZ, BINARY, VOID, VARIANT, ARRAY<T>, MAP<K,V>, STRUCT<columns>.

Refused though Spark takes them, because nothing downstream of a lookup handles them or they read
ambiguously: SQL comments (``--``, ``/* */``), unquoted names starting with a digit (``1d`` is a
number to Spark), INTERVAL, COLLATE, DEFAULT. Errors quote what the user wrote and say what to change.

Example::

    parse_columns("id BIGINT, tags ARRAY<STRING>")   # [('id', 'BIGINT'), ('tags', 'ARRAY<STRING>')]
"""
from __future__ import annotations

import re

__all__ = ["SchemaError", "parse_columns"]


class SchemaError(ValueError):
    """The schema DDL string is not valid."""


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<word>[A-Za-z0-9_]+)
  | (?P<punct>[<>(),:])
""", re.X | re.S)

_SIMPLE = {
    "BOOLEAN": "BOOLEAN", "TINYINT": "TINYINT", "BYTE": "TINYINT", "SMALLINT": "SMALLINT", "SHORT": "SMALLINT",
    "INT": "INT", "INTEGER": "INT", "BIGINT": "BIGINT", "LONG": "BIGINT", "FLOAT": "FLOAT", "REAL": "FLOAT",
    "DOUBLE": "DOUBLE", "STRING": "STRING", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMP_NTZ": "TIMESTAMP_NTZ", "TIMESTAMP_LTZ": "TIMESTAMP", "BINARY": "BINARY", "VOID": "VOID",
    "VARIANT": "VARIANT",
}
#: names users write that Spark does not know, and what to write instead
_HINTS = {"BOOL": "BOOLEAN", "TEXT": "STRING", "STR": "STRING", "INT64": "BIGINT", "INT32": "INT",
          "DATETIME": "TIMESTAMP", "NUMBER": "DECIMAL(p,s) or DOUBLE", "BYTES": "BINARY", "JSON": "STRING",
          "LIST": "ARRAY<type>", "DICT": "MAP<key type, value type>", "BIGINTEGER": "BIGINT"}
_MAX_PRECISION = 38


class _Token:
    __slots__ = ("kind", "text", "at")

    def __init__(self, kind: str, text: str, at: int):
        self.kind, self.text, self.at = kind, text, at

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _tokens(ddl: str) -> list[_Token]:
    found: list[_Token] = []
    at = 0
    while at < len(ddl):
        match = _TOKEN.match(ddl, at)
        if match is None:
            rest = ddl[at:]
            if rest.startswith(("`", "'", '"')):
                what = "backquoted name" if rest[0] == "`" else "quoted text"
                raise SchemaError(f"schema {ddl!r}: the {what} starting at character {at + 1} is never closed: "
                                  f"add the closing {rest[0]}")
            if rest.startswith(("--", "/*")):
                raise SchemaError(f"schema {ddl!r}: comments are not allowed (at character {at + 1}): "
                                  "use COMMENT 'text' after a column's type")
            raise SchemaError(f"schema {ddl!r}: unexpected {rest[0]!r} at character {at + 1}: a name with "
                              f"characters other than letters, digits and _ must be backquoted, e.g. `my-col` INT")
        if match.lastgroup != "space":
            found.append(_Token(match.lastgroup or "", match.group(), at))
        at = match.end()
    return found


class _Parser:
    def __init__(self, ddl: str):
        self.ddl = ddl
        self.tokens = _tokens(ddl)
        self.i = 0

    # -- helpers ---------------------------------------------------------------------------
    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise self.error("the schema ends too early (unbalanced brackets?)", "close every '<' and '('")
        self.i += 1
        return token

    def error(self, what: str, change: str, token: _Token | None = None) -> SchemaError:
        where = f" at character {token.at + 1} ({token.text!r})" if token is not None else ""
        return SchemaError(f"schema {self.ddl!r}: {what}{where}: {change}")

    def expect(self, text: str, change: str) -> _Token:
        token = self.peek()
        if token is None or token.text != text:
            found = f"found {token.text!r}" if token is not None else "found the end (unbalanced brackets?)"
            raise self.error(f"expected {text!r}, {found}", change, token)
        self.i += 1
        return token

    def at_word(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.upper in words

    # -- grammar ---------------------------------------------------------------------------
    def columns(self, inside_struct: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while True:
            start = self.peek()
            name = self.name(inside_struct)
            typ = self.type_(name)
            if self.at_word("NOT"):
                self.i += 1
                token = self.peek()
                if token is None or token.upper != "NULL":
                    raise self.error("NOT must be followed by NULL", "write NOT NULL", token)
                self.i += 1
            if self.at_word("COMMENT"):
                self.i += 1
                token = self.peek()
                if token is None or token.kind != "string":
                    raise self.error("COMMENT must be followed by quoted text", "write COMMENT 'text'", token)
                while token is not None and token.kind == "string":
                    self.i += 1
                    token = self.peek()
            out.append((name, typ))
            token = self.peek()
            if token is not None and token.text == ",":
                self.i += 1
                continue
            if token is None or (inside_struct and token.text == ">"):
                return out
            written = self.ddl[start.at if start is not None else 0:token.at].strip()
            if token.kind in ("word", "quoted"):
                change = (f"separate columns with a comma, e.g. '{written}, {self.ddl[token.at:].strip()}'"
                          if not inside_struct else "separate the STRUCT's fields with commas")
                raise self.error(f"column {written!r} is followed by {token.text!r}, not by a comma", change)
            raise self.error(f"unexpected {token.text!r} after column {written!r}",
                             "separate columns with commas, e.g. 'name STRING, price DOUBLE'", token)

    def name(self, inside_struct: bool) -> str:
        token = self.peek()
        if token is None or token.kind not in ("word", "quoted"):
            what = "a STRUCT field" if inside_struct else "a column"
            if token is None:
                raise self.error(f"{what} name is missing at the end: an empty column (stray comma?)",
                                 "remove the trailing comma or add the column")
            raise self.error(f"expected {what} name", "write 'name TYPE', e.g. 'price DOUBLE'", token)
        self.i += 1
        if token.kind == "quoted":
            name = token.text[1:-1].replace("``", "`")
            if not name:
                raise self.error("an empty column name", "name the column", token)
        else:
            name = token.text
            if name[0].isdigit():
                raise self.error(f"the name {name!r} starts with a digit", f"backquote it: `{name}`", token)
        following = self.peek()
        if following is not None and following.text == ":":
            self.i += 1
            following = self.peek()
        if following is None or following.text in (",", ">"):
            raise self.error(f"column {name!r} has no type", f"expected 'name TYPE', e.g. '{name} STRING'",
                             following)
        return name

    def type_(self, column: str) -> str:
        token = self.take()
        word = token.upper
        if word in _SIMPLE:
            return _SIMPLE[word]
        if word in ("CHAR", "CHARACTER", "VARCHAR"):
            (length,) = self.numbers(token, 1, 1, f"{word}(n) needs a length, e.g. {word}(10), or use STRING")
            if length < 1:
                raise self.error(f"{word}({length}) has no room", "give a length of at least 1", token)
            return f"{'VARCHAR' if word == 'VARCHAR' else 'CHAR'}({length})"
        if word in ("DECIMAL", "DEC", "NUMERIC"):
            token_next = self.peek()
            if token_next is None or token_next.text != "(":
                return "DECIMAL(10,0)"
            numbers = self.numbers(token, 1, 2, "write DECIMAL(precision, scale), e.g. DECIMAL(10,2)")
            precision, scale = numbers[0], (numbers[1] if len(numbers) > 1 else 0)
            if not 1 <= precision <= _MAX_PRECISION or scale > precision:
                raise self.error(f"DECIMAL({precision},{scale}) is out of range", "precision must be 1 to 38 "
                                 "and scale at most the precision", token)
            return f"DECIMAL({precision},{scale})"
        if word == "ARRAY":
            self.expect("<", "write ARRAY<type>, e.g. ARRAY<STRING>")
            inner = self.type_(column)
            self.expect(">", "close it: ARRAY<type>")
            return f"ARRAY<{inner}>"
        if word == "MAP":
            self.expect("<", "write MAP<key type, value type>, e.g. MAP<STRING, BIGINT>")
            key = self.type_(column)
            self.expect(",", "write MAP<key type, value type>")
            value = self.type_(column)
            self.expect(">", "close it: MAP<key type, value type>")
            return f"MAP<{key}, {value}>"
        if word == "STRUCT":
            self.expect("<", "write STRUCT<name TYPE, ...>")
            token_next = self.peek()
            fields = [] if token_next is not None and token_next.text == ">" else self.columns(inside_struct=True)
            self.expect(">", "close it: STRUCT<name TYPE, ...>")
            return "STRUCT<" + ", ".join(f"{n}: {t}" for n, t in fields) + ">"
        if token.kind != "word":
            raise self.error("expected a type", "write 'name TYPE', e.g. 'price DOUBLE'", token)
        if word in ("INTERVAL", "TIME", "GEOGRAPHY", "GEOMETRY"):
            raise self.error(f"{word} columns are not supported in a lookup schema",
                             "use STRING, BIGINT or TIMESTAMP", token)
        hint = _HINTS.get(word)
        raise self.error(f"unknown type {token.text!r} for column {column!r}",
                         f"write {hint}" if hint else "use a Spark type such as STRING, BIGINT, DOUBLE, "
                         "BOOLEAN, DECIMAL(p,s), TIMESTAMP, ARRAY<T>, MAP<K,V> or STRUCT<...>", token)

    def numbers(self, owner: _Token, least: int, most: int, change: str) -> list[int]:
        self.expect("(", change)
        found: list[int] = []
        while True:
            token = self.take()
            if token.kind != "word" or not token.text.isdigit():
                raise self.error(f"{owner.text} takes whole numbers", change, token)
            found.append(int(token.text))
            token = self.take()
            if token.text == ")":
                break
            if token.text != "," or len(found) >= most:
                raise self.error(f"unexpected {token.text!r} in {owner.text}(...)", change, token)
        if len(found) < least:
            raise self.error(f"{owner.text}(...) needs {least} number(s)", change, owner)
        return found


def parse_columns(ddl: str) -> list[tuple[str, str]]:
    """``(name, TYPE)`` of every column of a DDL column list; :class:`SchemaError` saying what to change.

    Example::

        parse_columns("`my col` DECIMAL(5, 2) NOT NULL")   # [('my col', 'DECIMAL(5,2)')]
    """
    if not isinstance(ddl, str) or not ddl.strip():
        raise SchemaError("schema must be a non-empty Spark DDL string such as 'name STRING, price DOUBLE'")
    parser = _Parser(ddl)
    columns = parser.columns(inside_struct=False)
    seen: set = set()
    for name, _ in columns:
        if name.lower() in seen:
            raise SchemaError(f"schema {ddl!r}: duplicate column {name!r} (names are case-insensitive): "
                              "rename one of them")
        seen.add(name.lower())
    return columns
