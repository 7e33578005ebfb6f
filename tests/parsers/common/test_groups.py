"""tracekit.parsers.common.groups: one process-group reader, every layout, one policy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tracekit.parsers.base import ProcessGroup, TraceMeta
from tracekit.parsers.common.groups import (
    default_group,
    group_ranks,
    merge_groups,
    only_group,
    read_process_groups,
)
from tracekit.parsers.common.values import MAX_TEXT_CHARS, Checker

NEW = {"pg_name": "1", "pg_desc": "tp", "backend_config": "cuda:nccl", "ranks": [2, 6], "group_size": 2}
WORLD = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo,cuda:nccl", "ranks": [], "group_size": 8}
OLDEST = {"pg_id": 3, "backend_id": 9, "backend_config": "cuda:nccl", "ranks": {"7": 1, "5": 0}}
KINETO = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}


def read(payload: Any) -> tuple[list[ProcessGroup], list[str]]:
    meta = TraceMeta(format="x")
    groups = read_process_groups(payload, Checker(meta), "here")
    return groups, [w.message for w in meta.warnings]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda entries: entries,  # Kineto distributedInfo.pg_config
        lambda entries: json.dumps(entries),  # PyTorch ET input: JSON text
        lambda entries: str([json.dumps(entries)]),  # Chakra .et: str() of the ET input list
        lambda entries: {str(i): e for i, e in enumerate(entries)},  # keyed by group id
    ],
    ids=["list", "json", "python-str-of-list", "dict"],
)
def test_every_payload_form_gives_the_same_groups(wrap: Any) -> None:
    groups, warnings = read(wrap([WORLD, NEW, OLDEST, KINETO]))
    assert warnings == []
    assert groups == [
        ProcessGroup("0", "default_pg", "gloo,nccl", 8, []),
        ProcessGroup("1", "tp", "nccl", 2, [2, 6]),
        ProcessGroup("3", None, "nccl", 2, [5, 7]),  # {global: group rank}, ordered by group rank
        ProcessGroup("0", "default_pg", "nccl", 2, [0, 1]),
    ]


def test_dict_layout_is_global_to_group_rank() -> None:
    assert group_ranks({"4": 0, "5": 1}) == [4, 5]
    assert group_ranks({"9": 1, "3": 0, "1": 2}) == [3, 9, 1]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"ranks": [0]}, "has no pg_name or pg_id"),
        ({"pg_name": "2", "ranks": "all"}, "ranks are not a list of ranks"),
        ({"pg_name": "2", "ranks": [0, -1]}, "ranks are not a list of ranks in [0, 1048575]"),
        ({"pg_name": "2", "ranks": [0, 2**40]}, "ranks are not a list of ranks in [0, 1048575]"),
        ({"pg_name": "2", "ranks": [3, 3]}, "ranks list a rank twice"),
        ({"pg_name": "2", "ranks": {"x": 0}}, "ranks are not a {global rank: group rank} map"),
        ({"pg_name": "2", "ranks": [], "group_size": 2**31 - 1}, "size is not a group size in [1, 1048576]"),
        ({"pg_name": "2", "ranks": [], "group_size": "many"}, "size is not a group size"),
        ("not an object", "is not an object"),
    ],
)
def test_a_bad_entry_is_skipped_with_a_warning(entry: Any, reason: str) -> None:
    groups, warnings = read([WORLD, entry])
    assert groups == [ProcessGroup("0", "default_pg", "gloo,nccl", 8, [])]
    [warning] = warnings
    assert reason in warning and "skipped" in warning


@pytest.mark.parametrize("payload", ["{broken", "[1, 2", 7, "'a string'"])
def test_an_unreadable_payload_is_one_warning_and_no_groups(payload: Any) -> None:
    groups, warnings = read(payload)
    assert groups == [] and len(warnings) == 1


def test_millions_of_entries_that_are_no_groups_cost_one_pass_and_a_few_lines() -> None:
    # 4 M entries took 15 s: an exception, an excerpt and a warning each (the warnings were capped).
    payload = json.dumps([WORLD, *[1] * (4 << 20), {}, {"ranks": [0]}])
    started = time.process_time()
    groups, warnings = read(payload)
    assert time.process_time() - started < 1.0
    assert groups == [ProcessGroup("0", "default_pg", "gloo,nccl", 8, [])]
    assert len(warnings) == 4 and all("skipped" in w for w in warnings[:3])
    assert warnings[3] == "4,194,303 more process-group entries skipped (only the first 3 are listed)"


def test_a_python_literal_of_millions_of_items_is_refused_without_being_built() -> None:
    # ast.literal_eval built it: 42 s and 4 GB for 8 MiB of "1,".
    started = time.process_time()
    groups, warnings = read("[" + "1," * (4 << 20) + "]")
    assert time.process_time() - started < 1.0
    assert groups == [] and len(warnings) == 1 and "Python literal" in warnings[0]


def test_the_chakra_form_of_megabytes_is_read_in_one_pass() -> None:
    entries = [{"pg_name": str(i), "pg_desc": "d'\\\né中", "ranks": [i]} for i in range(50_000)]
    text = str([json.dumps(entries)])
    assert len(text) > 3 << 20
    started = time.process_time()
    groups, warnings = read(text)
    assert time.process_time() - started < 2.0
    assert warnings == [] and len(groups) == 50_000 and groups[7].pg_desc == "d'\\\né中"


def test_names_and_descriptions_of_megabytes() -> None:
    huge = "x" * (MAX_TEXT_CHARS + 1)
    groups, warnings = read([{**NEW, "pg_desc": huge}, {**NEW, "pg_name": huge}, {**NEW, "backend_config": huge}])
    assert groups == [ProcessGroup("1", None, "nccl", 2, [2, 6]), ProcessGroup("1", "tp", None, 2, [2, 6])]
    assert len(warnings) == 3
    assert warnings[0].startswith("pg_desc = 'xxx") and warnings[0].endswith(": dropped")
    assert "skipped" in warnings[1] and "characters long" in warnings[1]
    assert warnings[2].startswith("backend_config = 'xxx") and warnings[2].endswith(": dropped")


def test_absent_or_empty_payload_is_silent() -> None:
    assert read(None) == ([], []) and read("") == ([], []) and read([]) == ([], [])


def test_lookups() -> None:
    world, tp = ProcessGroup("0", "default_pg", group_size=8), ProcessGroup("1", "tp", group_size=2, ranks=[2, 6])
    assert default_group([tp, world]) is world
    assert default_group([tp]) is tp and default_group([]) is None
    assert default_group([ProcessGroup("7", "default_pg"), tp]) is not None
    assert only_group([tp]) is tp and only_group([tp, world]) is None
    assert merge_groups([world, tp], [ProcessGroup("1", "tp2", group_size=4)]) == [
        world,
        ProcessGroup("1", "tp2", group_size=4),
    ]
