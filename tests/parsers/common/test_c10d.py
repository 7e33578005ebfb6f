"""tracekit.parsers.common.c10d: the dispatcher ops' arguments as data."""

from __future__ import annotations

import pytest

from tracekit.parsers.common.c10d import (
    C10D_ARGS,
    PEER_ARGS,
    arg_position,
    has_even_shards,
    is_in_place,
    lists_output_first,
)
from tracekit.parsers.common.names import comm_type_of


def test_every_op_is_a_collective_and_takes_a_process_group() -> None:
    for stem, names in C10D_ARGS.items():
        assert comm_type_of(f"c10d::{stem}") is not None, stem
        assert "process_group" in names, stem


@pytest.mark.parametrize(
    "stem",
    [
        "allgather_",
        "_allgather_base_",
        "allgather_coalesced_",
        "allgather_into_tensor_coalesced_",
        "reduce_scatter_",
        "_reduce_scatter_base_",
        "reduce_scatter_tensor_coalesced_",
        "gather_",
        "scatter_",
        "alltoall_",
        "alltoall_base_",
        "allgather_some_future_op_",
    ],
)
def test_output_first(stem: str) -> None:
    assert lists_output_first(stem)


@pytest.mark.parametrize("stem", ["allreduce_", "broadcast_", "reduce_", "send", "recv_", "barrier"])
def test_input_first(stem: str) -> None:
    assert not lists_output_first(stem)


def test_in_place_even_shards_and_positions() -> None:
    assert is_in_place("allreduce_") and is_in_place("recv_") and not is_in_place("send")
    assert has_even_shards("_allgather_base_") and not has_even_shards("allgather_")
    assert arg_position("send", PEER_ARGS) == 2 and arg_position("recv_", PEER_ARGS) == 2
    assert arg_position("alltoall_base_", "output_split_sizes") == 3
    assert arg_position("alltoall_base_", "input_split_sizes") == 4
    assert arg_position("unknown_", PEER_ARGS) is None
