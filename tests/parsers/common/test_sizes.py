"""tracekit.parsers.common.sizes: split lists and unevenness."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.parsers.base import TraceMeta
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven, split_sizes, splits_in_elements
from tracekit.parsers.common.values import COUNT, MAX_TEXT_CHARS, Checker, as_int


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("all_to_allv", "ALL_TO_ALL", None, None, False), True),
        (("alltoall_base_", "ALL_TO_ALL", [1, 2], [1, 1], True), True),
        (("alltoall_base_", "ALL_TO_ALL", [2, 2], [2, 2], True), False),
        (("alltoall_base_", "ALL_TO_ALL", None, None, True), False),  # recorded, empty: even
        (("all_to_all", "ALL_TO_ALL", None, None, False), None),  # nothing tells
        (("allgather_", "ALL_GATHER", None, None, False), None),
        (("_allgather_base_", "ALL_GATHER", None, None, True), False),
        (("allreduce", "ALL_REDUCE", None, None, False), False),  # cannot be uneven
    ],
)
def test_is_uneven(args: tuple[Any, ...], expected: bool | None) -> None:
    assert is_uneven(*args) is expected


@pytest.mark.parametrize(
    ("value", "expected", "warned"),
    [
        (None, None, False),
        ([1, 2], [1, 2], False),
        ("[4, 2, 5, 3]", [4, 2, 5, 3], False),
        ("[]", [], False),
        ("", [], False),
        ("[1, 2, ..., 9]", None, False),  # abbreviated by the profiler: not the whole list
        ("[1, x]", None, True),
        ("[1, -2]", None, True),
        (12, None, True),
        ([1, "a"], None, True),
        (" 1 ,, +2, 3 ,", [1, 2, 3], False),  # as_int reads each part: signs, spaces, empty parts
        ("\t[5,\n6]", [5, 6], False),
        ("1_000, 2", None, True),  # int() would take these; a trace never writes them
        ("\u0663, 1", None, True),
        ("1 2", None, True),
        ("+-1", None, True),
        ("9" * 41, None, True),  # no int64 with room to spare
    ],
)
def test_split_sizes(value: Any, expected: list[int] | None, warned: bool) -> None:
    meta = TraceMeta(format="x")
    assert split_sizes(value, "in_splits", Checker(meta), "here") == expected
    assert bool(meta.warnings) is warned


def test_a_split_text_of_more_values_than_ranks_is_refused_by_its_count() -> None:
    # 8 MiB of "1," took 6 s, one as_int per part, to be refused for its length afterwards.
    meta = TraceMeta(format="x")
    started = time.process_time()
    assert split_sizes("[" + "1," * (4 << 20) + "1]", "in_splits", Checker(meta), "node 3") is None
    assert time.process_time() - started < 0.2
    [warning] = meta.warnings
    assert "more than 1,048,576 values" in warning.message and warning.where == "node 3"


def test_a_long_split_text_is_read_in_one_pass() -> None:
    # 1 MiB of split sizes (half a million peers) cost 0.7 s read part by part.
    meta = TraceMeta(format="x")
    text = ", ".join(["7"] * (MAX_TEXT_CHARS // 3))
    started = time.process_time()
    splits = split_sizes(text, "in_splits", Checker(meta), None)
    assert time.process_time() - started < 0.3
    assert splits == [7] * (MAX_TEXT_CHARS // 3) and meta.warnings == []


def _split_sizes_part_by_part(text: str) -> list[int] | None:
    """The reference: every part read by as_int, within COUNT."""
    items = [as_int(part) for part in text.strip().removeprefix("[").removesuffix("]").split(",") if part.strip()]
    if any(item is None or not COUNT.holds(item) for item in items):
        return None
    return items  # type: ignore[return-value]


@given(
    st.text(alphabet="0123456789,+- \t\v\x1c\u0663_x", max_size=60) | st.from_regex(r"\[?( ?-?[0-9]{1,45} ?,){0,5}\]?")
)
def test_split_text_read_in_one_pass_as_part_by_part(text: str) -> None:
    meta = TraceMeta(format="x")
    assert split_sizes(f"[{text}]", "in_splits", Checker(meta), None) == _split_sizes_part_by_part(f"[{text}]")


def _a2a(**fields: Any) -> CollectiveRow:
    return CollectiveRow(op_id=1, comm_type="ALL_TO_ALL", source="s", **fields)


@pytest.mark.parametrize(
    ("fields", "expected", "inferred"),
    [
        # 1-D tensors (the DLRM trace): split sizes are already elements.
        ({"in_splits": [768] * 8, "in_elems": 6144}, {"in_splits": [768] * 8}, []),
        # 2-D tensors (sample moe_alltoall): split sizes count rows of 32 elements.
        (
            {"in_splits": [5, 2, 4, 1], "in_elems": 384, "out_splits": [4, 2, 5, 3], "out_elems": 448},
            {"in_splits": [160, 64, 128, 32], "out_splits": [128, 64, 160, 96]},
            ["in_splits", "out_splits"],
        ),
        ({"in_splits": [0, 0], "in_elems": 0}, {"in_splits": [0, 0]}, []),
    ],
)
def test_split_sizes_become_elements(fields: dict[str, Any], expected: dict[str, Any], inferred: list[str]) -> None:
    meta = TraceMeta(format="x")
    row = _a2a(**fields)
    splits_in_elements(row, Checker(meta), "here")
    assert {k: getattr(row, k) for k in expected} == expected
    assert row.inferred == inferred and meta.warnings == []


@pytest.mark.parametrize(
    "fields",
    [
        {"in_splits": [5, 2, 4, 1], "in_elems": 385},  # 12 rows do not make 385 elements
        {"in_splits": [0, 0], "in_elems": 64},
        {"in_splits": [3, 1], "in_elems": None},  # nothing tells their unit
    ],
)
def test_split_sizes_that_do_not_divide_the_elements_are_null_with_a_warning(fields: dict[str, Any]) -> None:
    meta = TraceMeta(format="x")
    row = _a2a(**fields)
    row.is_uneven = True
    splits_in_elements(row, Checker(meta), "here")
    assert row.in_splits is None and row.is_uneven is True  # unevenness does not depend on the unit
    [warning] = meta.warnings
    assert warning.message.startswith("in_splits = [") and warning.where == "here"


def test_inferred_null_stays_a_list_once_splits_are_converted() -> None:
    row = _a2a(in_splits=[1, 3], in_elems=8, inferred=None)
    splits_in_elements(row, Checker(TraceMeta(format="x")), None)
    assert (row.in_splits, row.inferred) == ([2, 6], ["in_splits"])
