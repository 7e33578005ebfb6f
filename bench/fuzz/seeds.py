"""Seed traces for the fuzzer: real files, decompressed, each tagged with its format."""

from __future__ import annotations

import gzip
import json
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
FORMATS = ("chakra_et", "chakra_json", "pytorch_et", "kineto", "flight_recorder", "nccl_log", "nccl_inspector")
# NCCL INFO logs: the parser tests' fixtures (real excerpts and a job in NCCL 2.21.5's line formats).
NCCL_LOGS = ROOT / "tests" / "parsers" / "nccl_log"
# NCCL Inspector JSON lines: the parser tests' fixtures (v4.0 and v4.3 dumps, a torn dump, NVIDIA's records).
INSPECTOR = ROOT / "tests" / "parsers" / "nccl_inspector"
# Seeds are cut to about this many JSON list items (nodes, traceEvents) so that one input parses in
# milliseconds and a campaign covers many mutations; the cut keeps every communication entry.
MAX_ITEMS = 600
# Generated jobs of the sample fleet (process groups, all-to-allv, send/recv) taken as seeds.
FLEET_JOBS = 12


@dataclass(frozen=True)
class Seed:
    format: str
    name: str
    data: bytes


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _members(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        out = []
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                out.append((Path(member.name).name, handle.read()))
        return out


def _is_comm(item: object) -> bool:
    text = json.dumps(item)[:4000].lower()
    return any(k in text for k in ("nccl", "gloo", "c10d", "record_param_comms", "process_group", "collective"))


def _cut_list(items: list, rng: random.Random) -> list:
    if len(items) <= MAX_ITEMS:
        return items
    keep = [i for i, item in enumerate(items) if _is_comm(item)][: MAX_ITEMS // 2]
    rest = sorted(rng.sample(range(len(items)), MAX_ITEMS - len(keep)))
    return [items[i] for i in sorted(set(keep) | set(rest))]


def _cut_json(data: bytes, key: str, rng: random.Random) -> bytes:
    doc = json.loads(data)
    if isinstance(doc, dict) and isinstance(doc.get(key), list):
        doc[key] = _cut_list(doc[key], rng)
    return json.dumps(doc).encode()


def _jsonize(et: bytes) -> bytes:
    """What chakra_jsonizer writes for an .et stream: MessageToJson of each record, glued."""
    from google.protobuf import json_format

    from tracekit.parsers import et_def_pb2
    from tracekit.parsers.chakra.framing import decode_varint

    parts, pos, first = [], 0, True
    while pos < len(et):
        length, pos = decode_varint(et, pos)
        message = et_def_pb2.GlobalMetadata() if first else et_def_pb2.Node()
        message.ParseFromString(et[pos : pos + length])
        parts.append(json_format.MessageToJson(message))
        pos += length
        first = False
    return "".join(parts).encode()


def _format_of(name: str, data: bytes) -> str | None:
    from tracekit.parsers import detect_format
    from tracekit.parsers.base import TraceError

    try:
        return detect_format(data[: 1 << 16], name)
    except TraceError:
        return None


def load_seeds(seed: int = 0) -> list[Seed]:
    """Every seed available here: the bundled samples (captured, Chakra, a few generated jobs)
    always, the public traces where present (../shared/traces/public)."""
    rng = random.Random(seed)
    files: list[tuple[str, bytes]] = []
    dumps = sorted(SAMPLES.glob("flight_recorder/*/nccl_trace_rank_*"))  # Flight Recorder: pickle and JSON
    logs = sorted(NCCL_LOGS.rglob("*.log")) + sorted(INSPECTOR.rglob("*.log"))
    for path in sorted(SAMPLES.glob("captured/*/*.json.gz")) + sorted(SAMPLES.glob("chakra/*/*.et")) + dumps + logs:
        files.append((f"{path.parent.name}/{path.name}", _read(path)))
    for path in sorted(SAMPLES.glob("fleet/*.tgz"))[:FLEET_JOBS]:  # generated jobs: rank 0 of each
        files += [(f"{path.name}!{name}", data) for name, data in _members(path)[:1]]
    if PUBLIC.is_dir():
        for path in sorted(PUBLIC.rglob("*")):
            if path.name.endswith(".tar.gz"):
                files += [(f"{path.name}!{name}", data) for name, data in _members(path)]
            elif path.is_file() and path.name.endswith((".et", ".json.gz", ".json")):
                files.append((f"{path.parent.name}/{path.name}", _read(path)))
    seeds: list[Seed] = []
    for name, data in files:
        name = name.removesuffix(".gz")  # the seed holds the decompressed bytes
        fmt = _format_of(name, data)
        if fmt == "pytorch_et":
            data = _cut_json(data, "nodes", rng)
        elif fmt == "kineto":
            data = _cut_json(data, "traceEvents", rng)
        if fmt is not None:
            seeds.append(Seed(fmt, name, data))
        if fmt == "chakra_et":
            json_name = name.rsplit(".et", 1)[0] + ".json"
            seeds.append(Seed("chakra_json", json_name, _jsonize(data)))
    return seeds
