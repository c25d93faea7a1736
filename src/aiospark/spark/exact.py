"""Output values that Arrow would change without a word: found before (or right after) conversion.

Arrow's conversion from Python refuses most values that do not fit a column (300 into TINYINT, a
string into INT, an int beyond LONG), but it changes some without a word, at any depth:

* a float into an integer column is truncated (``1.5`` -> ``1``; so too a NumPy float, a
  ``Decimal`` or a ``Fraction``);
* a string (or bytes, or a set) into an ARRAY becomes its characters (``"tag"`` -> ``['t', 'a',
  'g']``), a set in no particular order;
* a ``datetime`` into a DATE loses its time;
* a finite number beyond FLOAT's range becomes ``inf``;
* ``True`` into a DOUBLE or FLOAT becomes ``1.0``; ``bytes`` into a STRING is decoded, a ``str``
  into a BINARY encoded;
* a pandas ``Timestamp`` loses its nanoseconds; ``pd.NaT`` makes Arrow raise a ``ValueError``
  (refused instead: return None for a NULL);
* a MAP given as a list of pairs with a key twice reaches Spark with both (Spark itself refuses
  duplicate keys);
* a dict for a STRUCT with a key that is no field of it loses that key (``{"a": 1, "bb": 2}`` for
  ``STRUCT<a INT, b INT>`` gives ``b`` NULL);
* a naive ``datetime`` next to aware ones is read as UTC; an aware one loses its zone in a
  TIMESTAMP_NTZ column;
* NULL is written into NOT NULL columns, struct fields, array elements and map values (Spark then
  fails in the JVM with "Value at index is null", naming no row).

:class:`ExactChecks` and :func:`value_problem` find those and name the first one by its row and
its path (``answer.items[2].b``, ``m{'k'}``). The checks that need the Python value (the first
five kinds above) run before the conversion (:func:`plan_of`); the ones Arrow's result shows
(an ``inf`` in a FLOAT, a NULL under a NOT NULL field) are looked for in the converted array
(:func:`~aiospark.spark.exact_converted.arrow_suspect`, vectorized), and only then are the values
walked again to name it (``plan_of(..., full=True)``). The checks of plain values, column by
column, are :mod:`aiospark.spark.exact_leaves`'.

Example::

    checks = ExactChecks(StructType.fromDDL("n INT NOT NULL"))
    checks.problem([[1.5]])    # ("n", 1.5, "1.5 is not a whole number: ...")
    value_problem([[1, 2.5]], plan_of(ArrayType(IntegerType())), "xs", {})   # (2.5, "at xs[1] (row 0): ...")
"""
from __future__ import annotations

from itertools import chain, repeat
from operator import is_
from typing import Any

from pyspark.sql.types import ArrayType, DataType, MapType, Row, StructType

from .exact_converted import arrow_suspect, may_be_suspect
from .exact_leaves import NUMPY_KINDS, PLAIN, column_problem, kind_of

#: what Arrow would read as a sequence of characters, bytes or unordered items for an ARRAY
_NOT_ARRAYS = (str, bytes, bytearray, memoryview, set, frozenset)

#: (column, value, why) of a value that does not fit exactly
Problem = tuple[str, Any, str]
#: the types of an ARRAY column's values that need no look at each one (lists, or NULL)
_LISTS = frozenset({list, tuple, type(None)})


#: what to check in a value of a type: ("leaf", kind), ("array", element plan or None, elements
#: NOT NULL), ("map", key plan or None, value plan or None, values NOT NULL), ("struct", [(field
#: name, index, plan or None, NOT NULL)], field names); None when nothing in it needs a check
Plan = tuple[Any, ...]


def plan_of(data_type: DataType, full: bool = False) -> Plan | None:
    """What :func:`value_problem` must look at in values of ``data_type`` (None: nothing).

    Every ARRAY and STRUCT is looked at (a string is no array, a dict's keys must be fields);
    ``full`` adds NOT NULL at every depth and FLOAT overflow, which :func:`arrow_suspect` finds
    in the converted array first."""
    kind = kind_of(data_type, full)
    if kind is not None:
        return ("leaf", kind)
    if isinstance(data_type, ArrayType):
        return ("array", plan_of(data_type.elementType, full), full and not data_type.containsNull)
    if isinstance(data_type, MapType):  # always looked at: a list of pairs may repeat a key
        key, value = plan_of(data_type.keyType, full), plan_of(data_type.valueType, full)
        return ("map", key, value, full and not data_type.valueContainsNull)
    if isinstance(data_type, StructType):
        fields = [(f.name, i, plan_of(f.dataType, full), full and not f.nullable)
                  for i, f in enumerate(data_type.fields)]
        return ("struct", [f for f in fields if f[2] is not None or f[3]], frozenset(data_type.fieldNames()))
    return None


#: a place in an output: (parent, part), the root being (None, column name)
Path = tuple[Any, str]


def path_text(path: Path) -> str:
    parts = []
    while path is not None:
        path, part = path
        parts.append(part)
    return "".join(reversed(parts))


class _Found(Exception):
    """A value of the wrong shape, found while walking (ends the walk)."""

    def __init__(self, value: Any, row: int, path: Path, why: str):
        self.value, self.row, self.path, self.why = value, row, path, why


def value_problem(values: list[Any], plan: Plan, name: str,
                  aware_seen: dict[str, bool]) -> tuple[Any, str] | None:
    """The first of ``values`` (a column named ``name``, one value per row, checked by ``plan``)
    that, or a value nested in which, does not fit exactly, with why (saying where: the path and
    the row)."""
    if plan[0] == "leaf":
        found = column_problem(values, plan[1], name, aware_seen)
        if found is None:
            return None
        return found[1], f"at {name} (row {found[0]}): {found[2]}"
    if plan[0] == "array" and not plan[2] and set(map(type, values)) <= _LISTS:
        element = plan[1]
        if element is None:
            return None
        plain = PLAIN.get(element[1]) if element[0] == "leaf" else None
        if plain is not None and set(map(type, chain.from_iterable(filter(None, values)))) <= plain:
            return None  # the usual ARRAY of plain values (an embedding): C-level passes, no walk
    leaves: dict[str, tuple[str, list[Any], list[tuple[int, Path]]]] = {}  # pattern -> kind, values, places
    try:
        for row, v in enumerate(values):
            _collect(v, plan, row, (None, name), name, leaves)
    except _Found as found:
        return found.value, f"at {path_text(found.path)} (row {found.row}): {found.why}"
    for pattern, (kind, found_values, places) in leaves.items():
        why = column_problem(found_values, kind, pattern, aware_seen)
        if why is not None:
            row, path = places[why[0]]
            return why[1], f"at {path_text(path)} (row {row}): {why[2]}"
    return None


def _collect(value: Any, plan: Plan, row: int, path: Path, pattern: str,
             leaves: dict[str, tuple[str, list[Any], list[tuple[int, Path]]]]) -> None:
    """Check the shape of ``value`` and gather the leaf values under it by pattern (``xs[]``).
    A value of a shape Arrow refuses itself is left to Arrow."""
    if value is None:
        return
    tag = plan[0]
    if tag == "leaf":
        entry = leaves.get(pattern)
        if entry is None:
            entry = leaves[pattern] = (plan[1], [], [])
        entry[1].append(value)
        entry[2].append((row, path))
    elif tag == "array":
        if isinstance(value, _NOT_ARRAYS):
            raise _Found(value, row, path, f"a {type(value).__name__} is not an array (Arrow would take its "
                                           f"{'characters' if isinstance(value, str) else 'items'}): return a list")
        element, not_null = plan[1], plan[2]
        if element is None and not not_null:
            return
        if not isinstance(value, (list, tuple)):
            kinds = NUMPY_KINDS.get(element[1]) if element is not None and element[0] == "leaf" else None
            dtype_kind = getattr(getattr(value, "dtype", None), "kind", None)
            if kinds is not None and not not_null and dtype_kind is not None and dtype_kind in kinds:
                return  # a NumPy array of numbers: each fits
            value = list(value) if hasattr(value, "__iter__") else ()  # a NumPy array; else Arrow's to refuse
        for i, item in enumerate(value):
            if item is None:
                if not_null:
                    raise _Found(None, row, (path, f"[{i}]"), "the array's elements are NOT NULL: return a value, "
                                                             "or declare the elements nullable")
            elif element is not None:
                _collect(item, element, row, (path, f"[{i}]"), pattern + "[]", leaves)
    elif tag == "map":
        key_plan, value_plan, not_null = plan[1], plan[2], plan[3]
        if isinstance(value, dict):
            if key_plan is None and value_plan is None and not not_null:
                return
            items: Any = value.items()
        elif isinstance(value, list):
            items = value
            repeated = _repeated_key([p[0] for p in value if isinstance(p, tuple) and len(p) == 2])
            if repeated is not _NONE:
                raise _Found(value, row, path, f"the key {repeated!r} is given twice (Spark refuses a map with "
                                               f"duplicate keys): give each key once")
        else:
            items = ()
        for pair in items:
            if isinstance(pair, tuple) and len(pair) == 2:
                key, item = pair
                if key_plan is not None:
                    _collect(key, key_plan, row, (path, f"{{{key!r}}}"), pattern + "{key}", leaves)
                if item is None:
                    if not_null:
                        raise _Found(None, row, (path, f"{{{key!r}}}"), "the map's values are NOT NULL: return a "
                                                                      "value, or declare the values nullable")
                elif value_plan is not None:
                    _collect(item, value_plan, row, (path, f"{{{key!r}}}"), pattern + "{}", leaves)
    else:
        if isinstance(value, Row) and hasattr(value, "__fields__"):
            value = value.asDict(recursive=False)
        if isinstance(value, dict):
            extra = value.keys() - plan[2]
            if extra:
                shown = sorted(map(repr, extra))
                raise _Found(value, row, path, f"key(s) {', '.join(shown)} are not fields of the struct "
                                               f"{sorted(plan[2])}: fix the key names or add the fields")
        elif not isinstance(value, tuple):
            return  # Arrow's to refuse
        by_name = isinstance(value, dict)
        for field, index, sub, not_null in plan[1]:
            item = value.get(field) if by_name else value[index] if index < len(value) else None
            if item is None:
                if not_null:
                    raise _Found(None, row, (path, f".{field}"), "the field is NOT NULL: return a value (the "
                                                                 "key may be missing), or declare it nullable")
            elif sub is not None:
                _collect(item, sub, row, (path, f".{field}"), f"{pattern}.{field}", leaves)


_NONE = object()  # no key is repeated


def _repeated_key(keys: list[Any]) -> Any:
    """The first key of ``keys`` that an earlier one equals, or ``_NONE``."""
    try:
        if len(set(keys)) == len(keys):
            return _NONE
    except TypeError:  # an unhashable key (a struct key given as a dict): compared pairwise
        pass
    for i, key in enumerate(keys):
        if key in keys[:i]:
            return key
    return _NONE


class ExactChecks:
    """The checks of one output schema, with what one task has seen so far.

    A TIMESTAMP column takes naive datetimes (as UTC) or aware ones, but not both in one task: the
    first datetime a task returns for the column fixes which (a mix is almost always a bug that
    shifts some values by the UTC offset).
    """

    def __init__(self, schema: StructType):
        #: (index, name, plan) of every column with values to check before conversion
        self.columns = [(i, f.name, p) for i, f in enumerate(schema.fields) if (p := plan_of(f.dataType)) is not None]
        #: (index, name, full plan) of every column whose converted array may show a problem
        self.suspects = [(i, f.name, plan_of(f.dataType, True)) for i, f in enumerate(schema.fields)
                         if may_be_suspect(f.dataType)]
        self.not_null = [(i, f.name) for i, f in enumerate(schema.fields) if not f.nullable]
        self.aware: dict[str, bool] = {}

    def problem(self, columns: list[list[Any]]) -> Problem | None:
        """The first value of ``columns`` (every column's values, in schema order) that does not
        fit its column exactly, or None."""
        for index, name, plan in self.columns:
            why = value_problem(columns[index], plan, name, self.aware)
            if why is not None:
                return (name, *why)
        for index, name in self.not_null:
            if any(map(is_, columns[index], repeat(None))):  # by identity: a value's __eq__ may raise
                row = list(map(is_, columns[index], repeat(None))).index(True)
                return name, None, f"(row {row}) the column is NOT NULL: return a value, or declare it nullable"
        return None

    def converted_problem(self, batch: Any, columns: list[list[Any]]) -> Problem | None:
        """After the conversion: a NULL in a NOT NULL column, or what :func:`arrow_suspect` sees
        in a column (named by walking that column's values again), or None."""
        for index, name, plan in self.suspects:
            if plan is not None and arrow_suspect(batch.column(index)):
                why = value_problem(columns[index], plan, name, {})
                if why is not None:
                    return (name, *why)
        if any(batch.column(i).null_count for i, _ in self.not_null):
            return self.problem(columns)
        return None
