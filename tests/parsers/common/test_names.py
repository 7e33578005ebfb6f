"""tracekit.parsers.common.names: one vocabulary for every format's spelling of a collective."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracekit.parsers.common.names import (
    BACKEND_PREFIXES,
    C10D_NAMES,
    c10d_stem,
    comm_type_of,
    is_backend_annotation,
    is_uneven_name,
    normalize_dtype,
    parse_nccl_kernel,
)
from tracekit.schema import COMM_TYPES

PARSERS = Path(__file__).resolve().parents[3] / "tracekit" / "parsers"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("allreduce", "ALL_REDUCE"),
        ("nccl:all_reduce", "ALL_REDUCE"),
        ("gloo:all_gather", "ALL_GATHER"),
        ("xccl:all_reduce", "ALL_REDUCE"),
        ("xccl:reduce_scatter_tensor_coalesced", "REDUCE_SCATTER"),
        ("ucc:alltoall", "ALL_TO_ALL"),
        ("mpi:broadcast", "BROADCAST"),
        ("c10d::_allgather_base_", "ALL_GATHER"),
        ("c10d::recv_any_source_", "RECV"),
        ("nccl:send 0->1", "SEND"),
        ("all_to_allv", "ALL_TO_ALL"),
        ("All2All", "ALL_TO_ALL"),  # NCCL Inspector (ncclFuncToString)
        # Any backend's prefix (the Flight Recorder analyzer's list, torch 2.13, and nccl2 of 2026).
        ("ncclx:all_reduce", "ALL_REDUCE"),
        ("rccl:_allgather_base", "ALL_GATHER"),
        ("hccl:reduce_scatter_tensor_coalesced", "REDUCE_SCATTER"),
        ("nccl2:all_to_all_v_single", "ALL_TO_ALL"),
        ("mccl:recv 3<-0", "RECV"),
        ("aten::all_reduce", None),  # a namespace, not a backend
        ("wait", None),
        ("coalesced", None),
        ("", None),
        (None, None),
    ],
)
def test_comm_type_of_every_spelling(name: str | None, expected: str | None) -> None:
    assert comm_type_of(name) == expected


def test_every_backend_prefix_names_a_collective() -> None:
    for prefix in BACKEND_PREFIXES:
        assert is_backend_annotation(f"{prefix}all_reduce")
        assert comm_type_of(f"{prefix}all_reduce") == "ALL_REDUCE"
    assert not is_backend_annotation("record_param_comms")


def test_any_backend_prefix_is_an_annotation_when_it_names_a_collective() -> None:
    assert is_backend_annotation("rccl:all_gather") and is_backend_annotation("ncclx:send 0->1")
    assert not is_backend_annotation("fwd:layer1")  # a user's record_function, not a backend's work
    assert not is_backend_annotation("aten::add") and not is_backend_annotation("Optimizer.step#SGD.step")
    assert is_uneven_name("nccl2:all_to_allv")


def test_c10d_names_round_trip_and_use_the_data_model_vocabulary() -> None:
    for comm_type, name in C10D_NAMES.items():
        assert comm_type in COMM_TYPES
        assert comm_type_of(name) == comm_type
    assert c10d_stem("c10d::allreduce_") == "allreduce_" and c10d_stem("nccl:x") == "nccl:x"


def test_dtypes_and_kernels() -> None:
    assert normalize_dtype("Tensor(c10::BFloat16)") == "BFloat16"
    assert normalize_dtype("long int") == "Long" and normalize_dtype("f8e4m3") == "Float8_e4m3fn"
    assert normalize_dtype("mystery") is None
    assert parse_nccl_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == ("ALL_REDUCE", "Float")
    assert parse_nccl_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == (None, None)
    assert is_uneven_name("c10d::alltoallv") and not is_uneven_name("alltoall")


def _string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


@pytest.mark.parametrize(
    "path", sorted(p for p in PARSERS.rglob("*.py") if p.name != "names.py"), ids=lambda p: str(p.relative_to(PARSERS))
)
def test_no_parser_spells_a_name_of_its_own(path: Path) -> None:
    """Backend prefixes and the op names that mark collectives live in common/names.py only."""
    names = {*BACKEND_PREFIXES, "c10d::", "record_param_comms", "process_group:init", "## process_group:init ##"}
    assert not _string_constants(path) & names
