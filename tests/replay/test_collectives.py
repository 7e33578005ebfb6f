"""Matching a job's per-rank rows into logical collectives (tracekit.replay.collectives)."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.replay.collectives import match_job

_ROW: dict[str, Any] = {
    "trace_id": "t", "op_id": 0, "is_uneven": False, "peer": None, "dtype": "float32", "in_elems": None,
    "in_splits": None, "out_splits": None, "start_us": None, "duration_us": None,
}  # fmt: skip


def _rows(*rows: tuple[int, str, str, int, int]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            _ROW
            | {
                "rank": r,
                "op_name": op,
                "comm_type": "ALL_REDUCE",
                "pg_name": pg,
                "seq": seq,
                "in_bytes": size,
                "group_size": 2 if pg == "tp" else 4,
                "trace_id": f"t{r}",
                "op_id": i,
            }
            for i, (r, op, pg, seq, size) in enumerate(rows)
        ]  # fmt: skip
    )


def _groups(*groups: tuple[str, int, list[int]]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"pg_name": n, "group_size": s, "ranks": r} for n, s, r in groups],
        schema={"pg_name": pl.String, "group_size": pl.Int32, "ranks": pl.List(pl.Int32)},
    )


def test_a_group_of_no_listed_ranks_smaller_than_the_world_is_its_callers_not_the_world() -> None:
    # NCCL Inspector names a communicator and its size, not its members: process_groups holds
    # ranks [] for a 2-rank tensor-parallel communicator, which read as "the whole world" merged its
    # all-reduce #1 with the world's all-reduce #1 into one collective of 4 ranks.
    rows = _rows(
        (0, "AllReduce", "world", 1, 64 << 20), (1, "AllReduce", "world", 1, 64 << 20),
        (0, "AllReduce", "tp", 1, 32 << 20), (1, "AllReduce", "tp", 1, 32 << 20),
    )  # fmt: skip
    matched = match_job("j", 4, rows, _groups(("world", 4, []), ("tp", 2, [])))
    sizes = sorted(matched.collectives["size"].to_list())
    assert sizes == [32 << 20, 64 << 20]
    tp = matched.group_names.index("tp")
    assert matched.groups[tp] == (0, 1)
    assert any("'tp' is not described" in n for n in matched.notes)
