"""tracekit.parsers.common.values: the one value policy and its bounds."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tracekit.errors import MAX_WHERE_CHARS, one_line
from tracekit.parsers.base import MAX_WARNINGS, TraceMeta
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.values import (
    COUNT,
    EXCERPT_CHARS,
    INT64,
    MAX_COUNT,
    MAX_RANKS,
    MAX_TEXT_CHARS,
    RANK,
    SIZE,
    Checker,
    as_int,
    as_number,
    elements,
    excerpt,
    too_long,
)


def test_the_stated_bounds() -> None:
    assert MAX_RANKS == 2**20 and MAX_COUNT == 2**62
    assert (RANK.low, RANK.high) == (0, 2**20 - 1)
    assert (SIZE.low, SIZE.high) == (1, 2**20)
    assert (COUNT.low, COUNT.high) == (0, 2**62)
    assert (INT64.low, INT64.high) == (-(2**63), 2**63 - 1)


def test_as_int_reads_what_files_write_and_nothing_else() -> None:
    assert [as_int(v) for v in (3, 3.0, " 12 ", "-4", "+5")] == [3, 3, 12, -4, 5]
    assert [as_int(v) for v in (True, 3.5, "x", "1_000", "1" * 41, None, [1], float("inf"), float("nan"))] == [None] * 9
    assert as_int("9" * 40) == int("9" * 40)


def test_as_number_is_finite_or_none() -> None:
    assert as_number(2) == 2.0 and as_number(1.5) == 1.5
    assert [as_number(v) for v in (10**400, float("inf"), "1", True, None)] == [None] * 5


@given(
    st.one_of(
        st.text(),
        st.binary(),
        st.integers(),
        st.floats(),
        st.lists(st.text()),
        st.dictionaries(st.text(), st.integers()),
    )
)
def test_excerpt_is_short_and_always_writable(value: object) -> None:
    text = excerpt(value)
    assert len(text) <= EXCERPT_CHARS
    text.encode("utf-8")  # never raises: surrogates are escaped


def test_excerpt_of_huge_and_hostile_values() -> None:
    assert excerpt(2**1000) == "<integer of 1001 bits>"
    assert excerpt("\ud800x") == "'\\ud800x'"
    assert excerpt("a" * 10_000).endswith("…") and len(excerpt("a" * 10_000)) == EXCERPT_CHARS
    assert excerpt(list(range(100))) == "[0, 1, 2, 3, 4, 5, 6, 7, …]"


def test_checker_warns_once_per_field_with_a_count() -> None:
    meta = TraceMeta(format="x")
    check = Checker(meta)
    assert check.integer(5, "peer", RANK, "a") == 5
    assert check.integer(None, "peer", RANK, "a") is None and meta.warnings == []
    assert check.integer(2**31, "peer", RANK, "node 1") is None
    assert check.integer("x", "peer", RANK, "node 2") is None
    assert check.integer(-1, "group_size", SIZE, "node 3") is None
    assert [(w.message, w.where) for w in meta.warnings] == [
        ("peer = 2147483648 is out of bounds [0, 1048575]: left null (2 values in this file)", "node 1"),
        ("group_size = -1 is out of bounds [1, 1048576]: left null", "node 3"),
    ]


def test_a_string_longer_than_any_real_one_is_dropped_a_name_cut() -> None:
    # The longest string of the public and sample traces: 2,266 characters (an ET input type).
    assert MAX_TEXT_CHARS == 2**20
    meta = TraceMeta(format="x")
    check = Checker(meta)
    fits = "a" * MAX_TEXT_CHARS
    assert check.text(fits, "dtype", "node 1") is fits and check.name(fits, "name", "node 1") is fits
    assert check.text(7, "dtype", "node 1") == 7 and meta.warnings == []
    assert check.text(fits + "b", "dtype", "node 2") is None
    assert check.text(["x", [fits + "b"]], "dtype", "node 3") is None
    assert check.name("nccl:" + fits, "name", "node 4") == ("nccl:" + fits)[:MAX_TEXT_CHARS]
    dropped, cut = meta.warnings
    assert dropped.message.startswith("dtype = 'aaaa") and dropped.where == "node 2"
    assert dropped.message.endswith(
        " is 1,048,577 characters long, more than 1,048,576: dropped (2 values in this file)"
    )
    assert cut.message.startswith("name = 'nccl:aaaa") and cut.where == "node 4"
    assert cut.message.endswith(" is 1,048,581 characters long, more than 1,048,576: cut to its first 1,048,576")
    assert all(len(w.message) < 300 for w in meta.warnings)
    assert too_long(fits + "b") and too_long([[fits + "b"]]) and not too_long(fits) and not too_long(["a", 3])


def test_checker_row_nulls_every_field_out_of_bounds() -> None:
    meta = TraceMeta(format="x")
    row = CollectiveRow(
        op_id=2**63,
        comm_type="ALL_TO_ALL",
        source="s",
        group_size=0,
        peer=2**20,
        in_elems=2**62 + 1,
        out_bytes=-3,
        in_splits=[1, -1],
        seq=2**64,
        start_us=math.inf,
        duration_us=1.0,
    )
    Checker(meta).row(row, "here")
    assert (row.op_id, row.group_size, row.peer, row.in_elems, row.out_bytes, row.in_splits, row.seq) == (None,) * 7
    assert (row.start_us, row.duration_us) == (None, 1.0)
    assert len(meta.warnings) == 8 and all(w.where == "here" for w in meta.warnings)


def test_warnings_are_capped_and_printable() -> None:
    meta = TraceMeta(format="x")
    for i in range(MAX_WARNINGS + 10):
        meta.warn(f"bad {i} \ud800", "x" * 1000)
    assert len(meta.warnings) == MAX_WARNINGS + 1
    assert meta.warnings[-1].message.startswith("more warnings not listed")
    first = meta.warnings[0]
    assert first.message == "bad 0 \\ud800" and first.where is not None and len(first.where) <= MAX_WHERE_CHARS
    assert one_line("\udcff", 10) == "\\udcff"


def test_elements_of_a_shape() -> None:
    assert elements([]) == 1 and elements([3, 4]) == 12 and elements(["2", 5.0]) == 10
    assert elements([3, -1]) is None and elements([3, "x"]) is None and elements([True]) is None
    assert elements([2**62, 2**62, 0]) == 0  # a zero dimension wins, however big the others


def test_elements_never_multiplies_out_a_hostile_shape() -> None:
    # 10,000 dimensions of 4,000 digits: multiplied out, a number of 40 million digits.
    shape = [10**4000 - 1] * 10_000
    assert elements(shape) == MAX_COUNT + 1  # out of bounds: the row check nulls it


@given(st.lists(st.integers(min_value=0, max_value=2**70), max_size=6))
def test_elements_is_the_product_within_bounds(shape: list[int]) -> None:
    product = math.prod(shape)
    assert elements(shape) == (product if product <= MAX_COUNT else MAX_COUNT + 1)


def test_excerpt_of_a_deeply_nested_value_does_not_recurse_into_it() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep, {"k": deep}]
    text = excerpt(deep)
    assert text.startswith("[[[") and len(text) <= EXCERPT_CHARS


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@given(_json, st.sampled_from([RANK, SIZE, COUNT, INT64]))
def test_checker_integer_is_in_bounds_or_none_for_any_value(value: object, bound: Any) -> None:
    meta = TraceMeta(format="x")
    got = Checker(meta).integer(value, "field", bound, "here")
    assert got is None or (type(got) is int and bound.holds(got))
    assert len(meta.warnings) <= 1 and all(w.message.isprintable() for w in meta.warnings)


@given(_json)
def test_checker_time_is_finite_or_none_for_any_value(value: object) -> None:
    got = Checker(TraceMeta(format="x")).time(value, "start_us", "here")
    assert got is None or math.isfinite(got)
