"""Job finishing: ranks from content, world sizes, missing ranks; values a file claims never size an
allocation, whatever they are."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tracekit.ingest.discover import JobInfo
from tracekit.ingest.jobs import _complete_groups, decide_rank, finish_job, missing_ranges
from tracekit.ingest.worker import ParsedFile
from tracekit.parsers.base import ProcessGroup, TraceMeta


def _parsed(name: str, **meta: object) -> ParsedFile:
    parsed = ParsedFile("job", f"/in/{name}", name, f"id-{name}", "00" * 32, 10, format="kineto")
    parsed.meta = TraceMeta("kineto", **meta)  # type: ignore[arg-type]
    return parsed


def test_a_whole_world_group_of_a_huge_claimed_world_is_not_listed_rank_by_rank() -> None:
    groups: dict[str, dict[str, Any]] = {"0": {"pg_name": "0", "group_size": None, "ranks": [], "inferred": []}}
    tracemalloc.start()
    started = time.perf_counter()
    _complete_groups(groups, 2_147_483_647)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert groups["0"] == {"pg_name": "0", "group_size": 2_147_483_647, "ranks": [], "inferred": ["group_size"]}
    assert peak < 1 << 20 and elapsed < 1.0


def test_a_whole_world_group_of_a_small_world_lists_its_ranks() -> None:
    groups = {"0": {"pg_name": "0", "group_size": 8, "ranks": [], "inferred": []}}
    _complete_groups(groups, 8)
    assert groups["0"]["ranks"] == list(range(8)) and groups["0"]["inferred"] == ["ranks"]


def test_values_no_job_can_have_are_left_out_not_stored() -> None:
    files = [
        _parsed("a.json", rank=1 << 40, world_size=-1),
        _parsed("b.json", rank=3, world_size=10**20, rank_hint=1 << 63),
        _parsed("c.json", process_groups=[ProcessGroup("0", group_size=1 << 40, ranks=[1 << 35, 2])]),
    ]
    import polars  # noqa: F401 - loaded before measuring: its import is not what is measured here

    tracemalloc.start()
    result = finish_job(JobInfo("job", "/in"), files, [], [], "run")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [r["rank"] for r in result.traces] == [None, 3, None]
    assert [r["world_size"] for r in result.traces] == [None, None, None]
    group = result.process_groups[0]
    assert (group["ranks"], group["group_size"], group["inferred"]) == ([2], 1, ["group_size"])
    assert (result.job["world_size"], result.job["ranks_missing"], result.job["missing_ranks"]) == (4, 3, "0-2")
    assert peak < 4 << 20


def test_a_claimed_world_of_two_billion_costs_one_short_job_row() -> None:
    result = finish_job(JobInfo("job", "/in"), [_parsed("t.json", rank=5, world_size=2_147_483_647)], [], [], "run")
    assert result.job["ranks_missing"] == 2_147_483_646
    assert result.job["missing_ranks"] == "0-4, 6-2147483646"


def test_the_content_rank_wins_over_the_name_and_the_name_fills_in_below_the_world() -> None:
    assert decide_rank(_parsed("rank3.json", rank=1)).rank == 1
    assert "file name says rank 3" in (decide_rank(_parsed("rank3.json", rank=1)).warning or "")
    assert decide_rank(_parsed("rank3.json"), world_size=4).rank == 3
    refused = decide_rank(_parsed("rank3.json"), world_size=2)
    assert refused.rank is None and "not below the job's world size 2" in (refused.warning or "")
    # A rank argument in a file that records sub-groups may be local to one: the name comes first.
    subgroups = [ProcessGroup("0"), ProcessGroup("1", group_size=2, ranks=[2, 3])]
    assert decide_rank(_parsed("w.3.json", rank_hint=1, process_groups=subgroups)).rank == 3
    assert decide_rank(_parsed("w.3.json", rank_hint=1, process_groups=[ProcessGroup("0")])).rank == 1


@given(st.sets(st.integers(0, 10_000)), st.integers(0, 10_000))
def test_missing_ranges_are_the_complement_in_text_that_grows_with_the_ranks_seen(seen: set[int], extra: int) -> None:
    world = max(seen, default=-1) + 1 + extra
    text = missing_ranges(sorted(seen), world)
    listed: set[int] = set()
    for part in filter(None, text.split(", ")):
        low, _, high = part.partition("-")
        listed.update(range(int(low), int(high or low) + 1))
    assert listed == set(range(world)) - seen
    assert text.count(",") <= len(seen)
