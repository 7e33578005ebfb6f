"""Zero-filled traces of every format are refused within seconds, whatever their size.

    python bench/bench_zero_fill.py [--sizes 64M,2G] [--workers 2]

A preallocated file that was never written, or a half-written one (a real head, then zeros), is
what a crashed job or a half-copied archive leaves behind. Zero bytes frame valid empty Chakra
records, so such a file once parsed into a row per byte. For each format (named the way its files
are) this writes two kinds of file, plain and gzipped, at each size (inflated):

  zeros  nothing but zero bytes,
  tail   a real sample trace's first 32 KiB, then zeros,

and times `tracekit.parse_file` on it against a baseline measured in the same run: reading the
whole file (inflating it when gzipped) and doing nothing else, the least any reader that does not
refuse early must spend. Then `tracekit ingest` of all of them at once with --workers processes.

The gzip inflation limit of tracekit/sources.py (200x the stored size, at least 256 MiB) would
refuse a gzipped zero file too, but only once that much is inflated: 2 GiB of zeros gzip to ~2 MB,
so 400 MB would be inflated first. The count limits (tracekit/parsers/common/limits.py) refuse
within the first 64 KiB (format sniffing), the first 16 MiB chunk (JSON documents) or the first
4,096 records (Chakra), before the inflation limit is reached. Plain files are sparse: the run
needs no disk space.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tracekit  # noqa: E402
from bench.fuzz.seeds import _jsonize  # noqa: E402
from tracekit.errors import TraceError  # noqa: E402

HEAD_BYTES = 32 << 10
ZERO_MEMBER = 64 << 20
SAMPLE = ROOT / "sample_traces"
# Each format, named the way its files are named.
NAMES = {
    "chakra_et": "zero.0.et",
    "chakra_json": "zero.0.json",
    "pytorch_et": "zero_et_rank0.json",
    "kineto": "zero_rank0.pt.trace.json",
}


def heads() -> dict[str, bytes]:
    et = (SAMPLE / "chakra" / "ddp_mlp" / "ddp_mlp.0.et").read_bytes()
    return {
        "chakra_et": et[:HEAD_BYTES],
        "chakra_json": _jsonize(et)[:HEAD_BYTES],
        "pytorch_et": gzip.decompress((SAMPLE / "captured" / "ddp_mlp" / "et_rank0.json.gz").read_bytes())[:HEAD_BYTES],
        "kineto": gzip.decompress((SAMPLE / "captured" / "ddp_mlp" / "kineto_rank0.json.gz").read_bytes())[:HEAD_BYTES],
    }


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def write_plain(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # sparse: the rest reads as zeros and takes no disk space


def write_gzip(path: Path, head: bytes, size: int, zero_member: bytes) -> None:
    """gzip members: one of the head, then copies of one member of 64 MiB of zeros (a multi-member
    gzip inflates to their concatenation), then the rest."""
    with open(path, "wb") as f:
        if head:
            f.write(gzip.compress(head, compresslevel=6))
        left = size - len(head)
        while left >= ZERO_MEMBER:
            f.write(zero_member)
            left -= ZERO_MEMBER
        if left:
            f.write(gzip.compress(bytes(left), compresslevel=6))


def read_all(path: Path) -> float:
    """Seconds to read (and inflate) the whole file in 16 MiB chunks: the baseline."""
    start = time.perf_counter()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:  # type: ignore[operator]
        while f.read(16 << 20):
            pass
    return time.perf_counter() - start


def refuse(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        parsed = tracekit.parse_file(path)
    except TraceError as exc:
        return time.perf_counter() - start, exc.describe(path.name)
    return time.perf_counter() - start, f"PARSED ({parsed.ops.num_rows:,} ops rows)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64M,2G", help="inflated sizes, comma-separated (K, M, G)")
    parser.add_argument("--workers", type=int, default=2, help="ingest processes")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tracekit-zero-fill-"))
    zero_member = gzip.compress(bytes(ZERO_MEMBER), compresslevel=6)
    assert zlib.crc32(gzip.decompress(zero_member)) == zlib.crc32(bytes(ZERO_MEMBER))
    try:
        folder = work / "in"
        folder.mkdir()
        files = []
        for fmt, head in heads().items():
            for kind, prefix in (("zeros", b""), ("tail", head)):
                for size in sizes:
                    for packed in (False, True):
                        name = f"{kind}-{size >> 20}M-{NAMES[fmt]}" + (".gz" if packed else "")
                        path = folder / fmt / name
                        path.parent.mkdir(exist_ok=True)
                        (write_gzip(path, prefix, size, zero_member) if packed else write_plain(path, prefix, size))
                        files.append((fmt, kind, size, packed, path))
        head = f"{'format':<12}{'kind':<6}{'inflated':>9}{'stored':>10}  {'refused in':>10}  {'read all':>9}  ratio"
        print(head + "  reason")
        worst = 0.0
        for fmt, kind, size, packed, path in files:
            seconds, reason = refuse(path)
            baseline = read_all(path)
            worst = max(worst, seconds)
            stored = path.stat().st_blocks * 512
            print(
                f"{fmt:<12}{kind:<6}{size / (1 << 20):>8.0f}M{stored / (1 << 20):>9.1f}M  {seconds:>9.3f}s"
                f"  {baseline:>8.2f}s  {seconds / baseline:5.3f}  {reason.split(': ', 1)[-1][:70]}"
                + ("  (gz)" if packed else "")
            )
        print(f"slowest refusal: {worst:.3f} s over {len(files)} files")
        start = time.perf_counter()
        report = tracekit.ingest([folder], work / "out.dataset", workers=args.workers)
        seconds = time.perf_counter() - start
        print(
            f"tracekit ingest of all {len(files)} files with {args.workers} workers: {seconds:.1f} s, "
            f"{len(report.errors)} error rows, {report.files_added} files added"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
