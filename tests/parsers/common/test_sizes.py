"""tracekit.parsers.common.sizes: split lists and unevenness."""

from __future__ import annotations

from typing import Any

import pytest

from tracekit.parsers.base import TraceMeta
from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.sizes import is_uneven, split_sizes, splits_in_elements
from tracekit.parsers.common.values import Checker


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
    ],
)
def test_split_sizes(value: Any, expected: list[int] | None, warned: bool) -> None:
    meta = TraceMeta(format="x")
    assert split_sizes(value, "in_splits", Checker(meta), "here") == expected
    assert bool(meta.warnings) is warned


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
