"""Mutation operators: bytes for every format, structure for JSON documents, Chakra records and log lines.

`mutate(seed, corpus, rng)` applies one to three operators and returns the bytes, the file name to
parse them under, and the list of steps taken (saved with any finding so it can be replayed).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from bench.fuzz.seeds import Seed

# Keys whose values the parsers trust least: ranks, sizes, counts, splits, times, ids, groups.
HOT_KEYS = frozenset(
    (
        "rank",
        "world_size",
        "pg_size",
        "group_size",
        "ranks",
        "pg_config",
        "pg_name",
        "In msg nelems",
        "Out msg nelems",
        "In split size",
        "Out split size",
        "Group size",
        "Process Group Ranks",
        "Rank",
        "Src Rank",
        "Dst Rank",
        "Seq",
        "in_msg_nelems",
        "out_msg_nelems",
        "in_split_size",
        "out_split_size",
        "global_rank_start",
        "global_rank_stride",
        "ts",
        "dur",
        "inclusive_dur",
        "id",
        "ctrl_deps",
        "parent",
        "rf_id",
        "correlation",
        "External id",
        "Record function id",
        "Input Dims",
        "Input type",
        "Concrete Inputs",
        "values",
        "types",
        "shapes",
        "inputs",
        "outputs",
        "attrs",
        "value",
        "baseTimeNanoseconds",
        "distributedInfo",
        "durationMicros",
        "startTimeMicros",
        "ctrlDeps",
        "dataDeps",
        "int64Val",
        "uint64Val",
        "int32Val",
        "stringVal",
    )
)

# Mutations compound (100,000 dependencies in a record, then the record 1,000 times): an input that
# grows past this is no longer a mutated trace but a large one, whose memory the 1 GiB bound per
# input is not about (parse_file holds a file's whole table in memory). The step is undone.
MAX_INPUT_BYTES = 32 << 20
_HUGE_LITERAL = "\x00FUZZ-LITERAL\x00"
_DEPTHS = (50, 1500, 5000, 30000)
# Numbers JSON can spell but no trace should hold; the literal ones are spliced in as text.
LITERALS = ("1e999", "-1e999", "1" + "0" * 400, "-Infinity", "Infinity", "NaN", "1e308", "-0")
INTERESTING: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**31 - 2,
    2**32,
    2**40,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**20,
    1.5,
    -1e300,
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    "\ud800",
    "\udfff abc",
    "x" * 3000,
    "[1, 2, ...]",
    "[99999999999999999999]",
    "-5",
    None,
    True,
    False,
    [],
    {},
    [2**40, -1],
    [0] * 5000,
    {"0": 1, "1": 0},
    {"4": 0, "5": 1},
)


@dataclass
class Mutant:
    data: bytes
    name: str
    steps: list[str] = field(default_factory=list)


def _copies(wanted: int, unit: int, size: int = 0) -> int:
    """How many copies of `unit` bytes fit beside `size` bytes under MAX_INPUT_BYTES (at most
    `wanted`): duplications are cut before they are made, so that making an input stays small too."""
    return max(1, min(wanted, (MAX_INPUT_BYTES - size) // max(unit, 1)))


def mutate(seed: Seed, corpus: list[Seed], rng: random.Random) -> Mutant:
    mutant = Mutant(seed.data, seed.name, [f"seed {seed.format}:{seed.name}"])
    for _ in range(rng.choice((1, 1, 2, 3))):
        operators = list(_BYTE_OPS)
        if seed.format in ("pytorch_et", "kineto"):
            operators += [_json_doc] * (2 * len(_BYTE_OPS))
        elif seed.format == "chakra_json":
            operators += [_json_stream] * (2 * len(_BYTE_OPS))
        elif seed.format == "chakra_et":
            operators += [_et_records] * (2 * len(_BYTE_OPS))
        elif seed.format in ("nccl_log", "nccl_inspector"):  # line-oriented: numbers, lines moved, cut, repeated
            operators += [_log_lines] * (2 * len(_BYTE_OPS))
        op = rng.choice(operators)
        data = op(mutant.data, rng, mutant.steps, corpus)
        if len(data) > MAX_INPUT_BYTES:  # see MAX_INPUT_BYTES: the step is undone
            mutant.steps[-1] += f" (undone: {len(data):,} bytes)"
            continue
        mutant.data = data
    if rng.random() < 0.15:
        _gzip(mutant, rng)
    return mutant


def _gzip(mutant: Mutant, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.85:
        mutant.data = gzip.compress(mutant.data, compresslevel=1, mtime=0)
        mutant.name += ".gz"
        mutant.steps.append("gzip")
    elif roll < 0.93:
        mutant.name += ".gz"
        mutant.steps.append("named .gz, not gzip")
    else:
        packed = gzip.compress(mutant.data, compresslevel=1, mtime=0)
        cut = rng.randrange(2, max(3, len(packed)))
        mutant.data = packed[:cut]
        mutant.name += ".gz"
        mutant.steps.append(f"gzip truncated at {cut}")


# ------------------------------------------------------------------------------------- bytes


def _flip(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    steps.append("bit flips")
    return bytes(buf)


def _overwrite(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    n = rng.randint(1, 64)
    steps.append(f"overwrite {n} bytes at {i}")
    return data[:i] + bytes(rng.randrange(256) for _ in range(n)) + data[i + n :]


def _truncate(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    cut = rng.randrange(len(data) + 1)
    steps.append(f"truncate at {cut}")
    return data[:cut]


def _zero_run(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    i = rng.randrange(len(data) + 1)
    n = rng.choice((1, 16, 4096, 65536, 1 << 20))
    steps.append(f"insert {n} zero bytes at {i}")
    return data[:i] + bytes(n) + data[i:]


def _zero_fill(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    n = rng.choice((1, 8, 8192, 1 << 20, 2 << 20))
    steps.append(f"replace with {n} zero bytes")
    return bytes(n)


def _splice(data: bytes, rng: random.Random, steps: list[str], corpus: list[Seed]) -> bytes:
    other = rng.choice(corpus).data
    a = rng.randrange(len(other) + 1)
    chunk = other[a : a + rng.randint(1, 4096)]
    i = rng.randrange(len(data) + 1)
    steps.append(f"splice {len(chunk)} bytes of another seed at {i}")
    return data[:i] + chunk + data[i:]


def _duplicate(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    chunk = data[a : a + rng.randint(1, 4096)]
    steps.append(f"duplicate {len(chunk)} bytes at {a}")
    return data[:a] + chunk * rng.randint(2, 50) + data[a + len(chunk) :]


def _delete(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    n = rng.randint(1, 4096)
    steps.append(f"delete {n} bytes at {a}")
    return data[:a] + data[a + n :]


_BYTE_OPS = (_flip, _overwrite, _truncate, _zero_run, _zero_fill, _splice, _duplicate, _delete)


# -------------------------------------------------------------------------------------- JSON


def _pick(doc: Any, rng: random.Random) -> tuple[Any, Any, str] | None:
    """A random (container, key, key name) reached by walking down from the top, preferring hot keys."""
    found: tuple[Any, Any, str] | None = None
    node = doc
    for _ in range(64):
        if isinstance(node, dict) and node:
            keys = list(node)
            hot = [k for k in keys if k in HOT_KEYS]
            key = rng.choice(hot) if hot and rng.random() < 0.7 else rng.choice(keys)
        elif isinstance(node, list) and node:
            key = rng.randrange(len(node))
        else:
            break
        found = (node, key, key if isinstance(key, str) else "")
        child = node[key]
        hot_here = isinstance(key, str) and key in HOT_KEYS
        if not isinstance(child, (dict, list)) or rng.random() < (0.5 if hot_here else 0.08):
            break
        node = child
    return found


def _deep(depth: int) -> str:
    """A placeholder that `_dumps` spells as `depth` nested lists (json.dumps itself would recurse)."""
    return f"{_HUGE_LITERAL}DEEP{depth}"


def _edit(doc: Any, rng: random.Random, steps: list[str]) -> Any:
    place = _pick(doc, rng)
    if place is None:
        steps.append("json: replace document with a deep list")
        return _deep(rng.choice(_DEPTHS))
    container, key, name = place
    value = container[key]
    roll = rng.random()
    where = f"{name or key!r}"
    if roll < 0.45:
        # A copy: the values are shared, and an edit inside a shared one would change later inputs
        # (a parent re-making a finding would make another input) and can even make a cycle.
        new = copy.deepcopy(rng.choice(INTERESTING))
        if rng.random() < 0.25:
            new = _HUGE_LITERAL + rng.choice(LITERALS)
        container[key] = new
        steps.append(f"json: {where} = {str(new)[:40]!r}")
    elif roll < 0.55:
        container[key] = _deep(rng.choice(_DEPTHS))
        steps.append(f"json: {where} nested deeply")
    elif roll < 0.65:
        if isinstance(container, dict):
            del container[key]
        else:
            container.pop(key)
        steps.append(f"json: delete {where}")
    elif roll < 0.75:
        container[key] = _swap_type(value)
        steps.append(f"json: {where} type swapped")
    elif roll < 0.85 and isinstance(value, list) and value:
        i = rng.randrange(len(value))
        copies = _copies(rng.choice((1, 2, 100)), len(json.dumps(value[i], default=str)))
        value[i:i] = [value[i]] * copies
        steps.append(f"json: duplicate an item of {where} x{copies}")
    elif roll < 0.92 and isinstance(value, list):
        rng.shuffle(value)
        del value[rng.randrange(len(value) + 1) :]
        steps.append(f"json: shuffle and cut {where}")
    elif isinstance(container, dict):
        container["\ud800" if rng.random() < 0.5 else "x" * 5000] = value
        steps.append(f"json: odd key beside {where}")
    else:
        container[key] = str(value)[:100]
        steps.append(f"json: {where} as text")
    return doc


def _swap_type(value: Any) -> Any:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, dict):
        return list(value.values())
    return 0


def _dumps(doc: Any, rng: random.Random) -> bytes:
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.7, separators=(",", ":") if rng.random() < 0.5 else None)
    if "FUZZ-LITERAL" in text:
        for literal in (*LITERALS, *(f"DEEP{d}" for d in _DEPTHS)):
            spelled = "[" * int(literal[4:]) + "0" + "]" * int(literal[4:]) if literal.startswith("DEEP") else literal
            marker = _HUGE_LITERAL + literal
            for quoted in (json.dumps(marker), json.dumps(marker, ensure_ascii=False)):
                text = text.replace(quoted, spelled)
    return text.encode("utf-8", "surrogatepass")


def _json_doc(data: bytes, rng: random.Random, steps: list[str], corpus: list[Seed]) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return _flip(data, rng, steps, corpus)
    for _ in range(rng.choice((1, 1, 2, 4))):
        doc = _edit(doc, rng, steps)
    return _dumps(doc, rng)


def _json_stream(data: bytes, rng: random.Random, steps: list[str], corpus: list[Seed]) -> bytes:
    """chakra_jsonizer output: JSON objects glued with no separator; edit one of them."""
    try:
        text = data.decode()
        decoder = json.JSONDecoder()
        objects, pos = [], 0
        while pos < len(text):
            obj, end = decoder.raw_decode(text, pos)
            objects.append(obj)
            pos = end
            while pos < len(text) and text[pos].isspace():
                pos += 1
    except (ValueError, RecursionError):
        return _flip(data, rng, steps, corpus)
    if not objects:
        return data
    roll = rng.random()
    if roll < 0.1:
        steps.append("chakra_json: many empty objects first")
        return b"{}" * rng.choice((1000, 100000)) + b"".join(_dumps(o, rng) for o in objects)
    elif roll < 0.2:
        i = rng.randrange(len(objects))
        copies = _copies(rng.choice((2, 1000)), len(json.dumps(objects[i], default=str)), len(data))
        objects[i:i] = [objects[i]] * copies
        steps.append(f"chakra_json: duplicate an object x{copies}")
    else:
        i = rng.randrange(len(objects))
        objects[i] = _edit(objects[i], rng, steps)
    return b"".join(_dumps(o, rng) for o in objects)


# ------------------------------------------------------------------------------- Chakra .et


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _records(data: bytes) -> list[bytes] | None:
    from tracekit.parsers.chakra.framing import decode_varint

    out, pos = [], 0
    try:
        while pos < len(data):
            if len(out) > 20000:
                return None  # an earlier mutation made many records: edit the bytes instead
            length, pos = decode_varint(data, pos)
            if pos + length > len(data):
                return None
            out.append(data[pos : pos + length])
            pos += length
    except Exception:
        return None
    return out


def _et_records(data: bytes, rng: random.Random, steps: list[str], corpus: list[Seed]) -> bytes:
    records = _records(data)
    if not records:
        return _flip(data, rng, steps, corpus)
    roll = rng.random()
    i = rng.randrange(len(records))
    if roll < 0.08:
        steps.append(f"et: empty records before record {i}")
        return _frame(records[:i]) + bytes(rng.choice((10, 10000, 1000000))) + _frame(records[i:])
    elif roll < 0.14:
        del records[i]
        steps.append(f"et: drop record {i}")
    elif roll < 0.2:
        copies = _copies(rng.choice((2, 1000)), len(records[i]) + 10, len(data))
        records[i:i] = [records[i]] * copies
        steps.append(f"et: duplicate record {i} x{copies}")
    elif roll < 0.26:
        steps.append(f"et: record {i} claims a huge length")
        return _frame(records[:i]) + _varint(rng.choice((2**31, 2**40, 2**63))) + b"".join(records[i:])
    elif roll < 0.32:
        records[i] = records[i] + _varint(rng.randrange(1, 2000) << 3 | rng.choice((0, 1, 2, 5))) + _varint(2**63)
        steps.append(f"et: unknown field appended to record {i}")
    else:
        records[i] = _edit_node(records[i], rng, steps, i)
    return _frame(records)


def _frame(records: list[bytes]) -> bytes:
    return b"".join(_varint(len(r)) + r for r in records)


_INT_FIELDS = ("int64_val", "uint64_val", "int32_val", "uint32_val", "sint64_val", "fixed64_val", "sfixed64_val")
_EXTREMES = (0, -1, 2**31 - 1, 2**31, 2**40, 2**63 - 1, -(2**63), 2**64 - 1)


def _edit_node(payload: bytes, rng: random.Random, steps: list[str], index: int) -> bytes:
    from tracekit.parsers import et_def_pb2

    node = et_def_pb2.Node()
    try:
        node.ParseFromString(payload)
    except Exception:
        return payload
    roll = rng.random()
    try:
        if roll < 0.15:
            node.id = rng.choice((0, 2**63 - 1, 2**64 - 1, 1))
            steps.append(f"et: record {index} id = {node.id}")
        elif roll < 0.25:
            node.type = rng.choice((0, 1, 5, 6, 7, 99, 2**31 - 1))
            steps.append(f"et: record {index} type = {node.type}")
        elif roll < 0.35:
            node.ctrl_deps.extend([rng.choice(_EXTREMES) & (2**64 - 1)] * rng.choice((1, 1000, 100000)))
            steps.append(f"et: record {index} many/odd ctrl_deps")
        elif roll < 0.45:
            node.inputs.values = rng.choice(
                (
                    '[\'[{"pg_name": "0", "ranks": [0, 1099511627776], "group_size": 2147483647}]\']',
                    '[{"pg_name": "1", "ranks": {"4": 0, "5": 1}}]',
                    "[" * 5000,
                    '[{"pg_name": 0, "ranks": "abc", "group_size": -1}]',
                    "x" * 100000,
                )
            )
            node.name = "## process_group:init ##"
            node.type = 1
            steps.append(f"et: record {index} becomes an odd process_group:init")
        elif roll < 0.55:
            node.start_time_micros = rng.choice((2**63, 2**64 - 1, 1))
            node.duration_micros = rng.choice((2**63, 2**64 - 1, 0))
            steps.append(f"et: record {index} extreme times")
        else:
            attr = node.attr.add() if not node.attr or rng.random() < 0.3 else rng.choice(list(node.attr))
            attr.name = rng.choice(("comm_type", "comm_size", "comm_src", "comm_dst", "pg_name", "rf_id", "is_cpu_op"))
            variant = rng.choice(_INT_FIELDS)
            value = rng.choice(_EXTREMES)
            bits = 32 if "32" in variant else 64
            unsigned = variant.startswith(("uint", "fixed"))
            if unsigned:
                value &= (1 << bits) - 1
            else:
                value = max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, value))
            setattr(attr, variant, value)
            steps.append(f"et: record {index} attr {attr.name}.{variant} = {value}")
        return node.SerializeToString()
    except (ValueError, TypeError, OverflowError):
        return payload


# ---------------------------------------------------------------------------------- log lines

# What an NCCL INFO line's numbers are set to: the bounds of every field (ranks, nranks, counts,
# opCounts, datatypes, devices, pids) and past them.
_LOG_VALUES = (
    *("0", "-1", "1", "99", "1048575", "1048576"),
    *(str(1 << 62), str(1 << 63), str(1 << 64), "9" * 40, "9" * 400),
)
_LOG_NUMBER = re.compile(rb"(?<![0-9A-Za-z])(?:0x)?[0-9a-f]+(?![0-9A-Za-z])")
_LOG_OPS = (b"AllReduce", b"AllGather", b"ReduceScatter", b"AlltoAll", b"Send", b"Recv", b"Gather", b"PutSignal", b"X")


def _log_lines(data: bytes, rng: random.Random, steps: list[str], _c: list[Seed]) -> bytes:
    """A line of the log edited: a number set to a bound or past it, an op renamed, the line repeated,
    moved, dropped or cut, or the line of another process (its prefix) given to it."""
    lines = data.split(b"\n")
    if not lines:
        return data
    i = rng.randrange(len(lines))
    line = lines[i]
    roll = rng.random()
    numbers = list(_LOG_NUMBER.finditer(line))
    if roll < 0.45 and numbers:
        m = rng.choice(numbers)
        value = rng.choice(_LOG_VALUES).encode()
        if m.group().startswith(b"0x"):
            value = b"0x" + (b"f" * rng.choice((1, 16, 17, 40)))
        lines[i] = line[: m.start()] + value + line[m.end() :]
        steps.append(f"log: line {i + 1} number {m.group()[:20]!r} -> {value[:20]!r}")
    elif roll < 0.6:
        op = rng.choice(_LOG_OPS)
        lines[i] = re.sub(rb"NCCL INFO [A-Za-z]+:", b"NCCL INFO " + op + b":", line, count=1)
        steps.append(f"log: line {i + 1} op -> {op.decode()}")
    elif roll < 0.75:
        copies = _copies(rng.choice((2, 100, 1_000, 10_000)), len(line) + 1, len(data))
        lines[i : i + 1] = [line] * copies
        steps.append(f"log: line {i + 1} x{copies}")
    elif roll < 0.85:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        steps.append(f"log: lines {i + 1} and {j + 1} swapped")
    elif roll < 0.92:
        cut = rng.randrange(len(line) + 1)
        lines[i] = line[:cut]
        steps.append(f"log: line {i + 1} cut at {cut}")
    else:
        other = lines[rng.randrange(len(lines))]
        prefix, sep, _ = other.partition(b" NCCL INFO ")
        rest = line.partition(b" NCCL INFO ")[2]
        if sep and rest:
            lines[i] = prefix + sep + rest
        steps.append(f"log: line {i + 1} given another line's prefix")
    return b"\n".join(lines)
