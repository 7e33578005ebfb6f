"""Every row the Kineto parser makes from real traces (the samples captured with torch, the public
ones), held as a fingerprint per file: the row counts and a SHA-256 of the rows, metadata and
warnings. Any change to a row of `ops` or `collectives` shows here, so a change meant only to make
parsing faster can be checked to leave every row as it was.

A deliberate change of the rows regenerates the file with TRACEKIT_REGEN_GOLDEN=1 (the public
traces' entries only where ../shared is present: they are kept otherwise).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PUBLIC_TRACES, SAMPLE_TRACES
from tests.golden import assert_golden
from tracekit.parsers import kineto
from tracekit.parsers.base import MemorySink, Source
from tracekit.sources import BytesSource, FileSource

SAMPLES = sorted((SAMPLE_TRACES / "captured").glob("*/kineto_rank*.json.gz"))


def _public_sources() -> Iterator[tuple[str, Source]]:
    hta = PUBLIC_TRACES / "hta-nccl-2gpu" / "nccl_data.json.gz"
    if hta.is_file():
        yield "public/hta-nccl-2gpu/nccl_data.json.gz", FileSource(hta, str(hta))
    dlrm = PUBLIC_TRACES / "param-dlrm-8rank" / "dlrm_kineto.tar.gz"
    if dlrm.is_file():
        with tarfile.open(dlrm) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                file = tar.extractfile(member) if member.isfile() else None
                if file is not None:
                    yield f"public/param-dlrm-8rank/{member.name}", BytesSource(file.read(), member.name, member.name)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(source: Source) -> dict[str, Any]:
    sink = MemorySink()
    meta = kineto.parse(source, sink)
    ops = sink.table("ops").to_pylist()
    collectives = sink.table("collectives").to_pylist()
    return {
        "ops": len(ops),
        "collectives": len(collectives),
        "ops_sha256": _digest(ops),
        "collectives_sha256": _digest(collectives),
        "meta_sha256": _digest(
            [meta.rank, meta.world_size, meta.started_at, meta.node_count, meta.schema_version, meta.process_groups]
        ),
        "warnings": sorted(str(w) for w in meta.warnings),
    }


def _check(name: str, source: Source) -> None:
    assert_golden("kineto_fingerprints", fingerprint(source), key=name)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sample_trace_rows_are_unchanged(path: Path) -> None:
    _check(f"sample/{path.parent.name}/{path.name}", FileSource(path, str(path)))


def test_public_trace_rows_are_unchanged(public_traces: Path) -> None:
    sources = list(_public_sources())
    if not sources:
        pytest.skip("no Kineto traces among the public traces")
    for name, source in sources:
        _check(name, source)
