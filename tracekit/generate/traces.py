"""The per-rank trace content of one generated job: Chakra .et records, or PyTorch ET JSON documents.

One iteration of each class (generate.workloads, repeated `fleet.iterations` times) is built rank by
rank on a RankTrace (generate.rank_trace), its all-to-allv splits drawn by generate.alltoallv;
rank_records serializes each rank as .et records, and rank_documents, with EtJsonRankTrace
(generate.et_json_trace), as PyTorch Execution Trace JSON of the same nodes
(`generate --trace-format pytorch-et`), which ingest reads into the same collectives rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tracekit.generate.et_json_trace import EtJsonRankTrace
from tracekit.generate.rank_trace import RankTrace
from tracekit.generate.workloads import BUILDERS

if TYPE_CHECKING:
    from tracekit.generate.jobs import JobSpec


def rank_records(
    spec: JobSpec, profile: dict[str, Any], cache: dict[tuple[Any, ...], bytes]
) -> Iterator[tuple[int, list[bytes]]]:
    """(rank, Node records) for every rank of the job, in rank order."""
    bytes_per_us = _bytes_per_us(profile)
    for rank, trace in BUILDERS[spec.cls](spec, profile, lambda _rank: RankTrace(cache, bytes_per_us), bytes_per_us):
        yield rank, trace.records


def rank_documents(spec: JobSpec, profile: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(rank, PyTorch ET JSON document) for every rank of the job, in rank order: the same nodes as
    rank_records, written as ExecutionTraceObserver does (see EtJsonRankTrace)."""
    bytes_per_us = _bytes_per_us(profile)
    tensor_ids = [0]

    def new(rank: int) -> EtJsonRankTrace:
        return EtJsonRankTrace(bytes_per_us, rank, tensor_ids)

    for rank, trace in BUILDERS[spec.cls](spec, profile, new, bytes_per_us):
        yield rank, trace.document(spec)


def _bytes_per_us(profile: dict[str, Any]) -> float:
    return float(profile["fleet"].get("link_gbps", 400.0) * 1e3 / 8)
