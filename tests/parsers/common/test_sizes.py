"""tracekit.parsers.common.sizes: split lists and unevenness."""

from __future__ import annotations

from typing import Any

import pytest

from tracekit.parsers.base import TraceMeta
from tracekit.parsers.common.sizes import is_uneven, split_sizes
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
