"""Write PyTorch Execution Trace JSON (`torch.profiler.ExecutionTraceObserver`, schema 1.1.1).

The layout is the one the observer writes (and tracekit.parsers.pytorch_et reads):

    {"schema": "1.1.1-chakra.0.0.4", "pid": ..., "time": "%Y-%m-%d %H:%M:%S", "start_ts": ...,
     "nodes": [...], "finish_ts": ...}

Every node has `id`, `name`, `ctrl_deps` (its single parent), `inputs`/`outputs` as parallel
`values`/`shapes`/`types`/`strides` arrays and `attrs` as `{name, type, value}` objects starting
with the standard ones (rf_id, fw_parent, seq_id, scope, tid, fw_tid, op_schema, kernel_backend,
kernel_file, tensor_range). The tree hangs from `[pytorch|profiler|execution_trace|process]` (id 1,
its own parent, written last as the observer does) and its `[pytorch|profiler|execution_trace|thread]`
child (id 2); `## process_group:init ##` lists the process groups as a JSON string, the whole-world
group with an empty rank list as PyTorch records it.

A collective is a `record_param_comms` node in torch >= 2.4's input layout

    [tensor, (seq, isP2P), (pg_name, pg_desc), rank, collective name, in_split, out_split,
     global_rank_start, global_rank_stride, group size]

plus the schema >= 1.1.0 comm attrs (collective_name, dtype, in_msg_nelems, out_msg_nelems,
in_split_size, out_split_size, global_rank_start, global_rank_stride, pg_name, pg_desc, pg_size).
`rank` is the caller's group-local rank, or for send/recv the group-local peer. Sizes are in
elements of `dtype`; in bytes they are `nelems * itemsize`.

Used by the synthetic fleet generator (`tracekit generate --trace-format pytorch-et`), which writes
millions of nodes, so it is lean: nodes are dicts whose `attrs` are pre-encoded (`msgspec.Raw`;
decode `dumps(node)` to read them), encoded with msgspec and compressed with a fixed gzip header, so
the bytes depend only on the content.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec

from tracekit.parsers.common.names import DTYPE_BYTES, PG_INIT_NAME, RECORD_PARAM_COMMS

SCHEMA = "1.1.1-chakra.0.0.4"
PROCESS_NAME = "[pytorch|profiler|execution_trace|process]"
THREAD_NAME = "[pytorch|profiler|execution_trace|thread]"
PROCESS_ID = 1
THREAD_ID = 2

# c10 ScalarType name -> ET tensor type (itemsizes: tracekit.parsers.common.names.DTYPE_BYTES).
DTYPES: dict[str, str] = {
    "BFloat16": "Tensor(c10::BFloat16)",
    "Half": "Tensor(c10::Half)",
    "Float": "Tensor(float)",
    "Long": "Tensor(long int)",
    "Int": "Tensor(int)",
    "Byte": "Tensor(unsigned char)",
}

_EMPTY_IO: dict[str, list[Any]] = {"values": [], "shapes": [], "types": [], "strides": []}
_encode = msgspec.json.Encoder().encode


def _standard_attrs(
    rf_id: int, seq_id: int = -1, scope: int = 0, tid: int = 1, op_schema: str = "", extra: bytes = b""
) -> msgspec.Raw:
    """The standard attrs, then `extra` (encoded attrs, each after a comma), as one pre-encoded value."""
    key = (seq_id, scope, tid, op_schema)
    tail = _ATTR_TAILS.get(key)
    if tail is None:
        rest = [
            {"name": "fw_parent", "type": "uint64", "value": 0},
            {"name": "seq_id", "type": "int64", "value": seq_id},
            {"name": "scope", "type": "uint64", "value": scope},
            {"name": "tid", "type": "uint64", "value": tid},
            {"name": "fw_tid", "type": "uint64", "value": 0},
            {"name": "op_schema", "type": "string", "value": op_schema},
            {"name": "kernel_backend", "type": "string", "value": ""},
            {"name": "kernel_file", "type": "string", "value": ""},
            {"name": "tensor_range", "type": "string", "value": ""},
        ]
        tail = _ATTR_TAILS[key] = b"}," + _encode(rest)[1:-1]
    return msgspec.Raw(b'[{"name":"rf_id","type":"uint64","value":%d%s%s]' % (rf_id, tail, extra))


_ATTR_TAILS: dict[tuple[int, int, int, str], bytes] = {}


def _node(node_id: int, name: str, parent: int, attrs: Any, inputs: Any = None, outputs: Any = None) -> dict:
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": inputs if inputs is not None else _EMPTY_IO,
        "outputs": outputs if outputs is not None else _EMPTY_IO,
        "attrs": attrs,
    }


def process_node() -> dict[str, Any]:
    """The root (id 1, its own parent)."""
    return _node(PROCESS_ID, PROCESS_NAME, PROCESS_ID, _standard_attrs(0, scope=7, tid=0))


def thread_node() -> dict[str, Any]:
    """The thread node under the root (id 2); every op of the rank hangs under it."""
    return _node(THREAD_ID, THREAD_NAME, PROCESS_ID, _standard_attrs(0, scope=7))


def pg_init_node(node_id: int, groups: list[dict[str, Any]], rf_id: int = 1) -> dict[str, Any]:
    """`## process_group:init ##`: the groups as the JSON string of a list of
    {pg_name, pg_desc, backend_config, ranks, group_size, group_count} (whole world: ranks [])."""
    text = json.dumps(groups)
    inputs = {"values": [text], "shapes": [[]], "types": ["String"], "strides": [[]]}
    return _node(node_id, PG_INIT_NAME, THREAD_ID, _standard_attrs(rf_id, scope=7), inputs)


def op_node(
    node_id: int, name: str, rf_id: int, *, seq_id: int = -1, op_schema: str = "", parent: int = THREAD_ID
) -> dict[str, Any]:
    """An ordinary op (a compute region: a user annotation or an aten op) without arguments."""
    return _node(node_id, name, parent, _standard_attrs(rf_id, seq_id=seq_id, op_schema=op_schema))


def tensor(tensor_id: int, numel: int, itemsize: int, device: str) -> list[Any]:
    """[tensor_id, storage_id, offset, numel, itemsize, device]."""
    return [tensor_id, tensor_id, 0, numel, itemsize, device]


# Per split-list length: (type, shapes/strides entry); all-to-alls of one group share them.
_SPLIT_META: dict[int, tuple[str, list[list[Any]]]] = {}


def _split_meta(count: int) -> tuple[str, list[list[Any]]]:
    meta = _SPLIT_META.get(count)
    if meta is None:
        meta = _SPLIT_META[count] = ("GenericList[" + ",".join(["Int"] * count) + "]", [[]] * count)
    return meta


def rank_range(ranks: list[int]) -> tuple[int, int]:
    """(global_rank_start, global_rank_stride) of a group's global ranks; (-1, -1) when not strided."""
    if not ranks:
        return 0, 1  # the whole world
    if len(ranks) == 1:
        return ranks[0], 1
    stride = ranks[1] - ranks[0]
    if stride <= 0 or any(b - a != stride for a, b in zip(ranks, ranks[1:], strict=False)):
        return -1, -1
    return ranks[0], stride


_COMM_STATIC: dict[tuple[Any, ...], tuple[list[str], list[Any], bytes, bytes]] = {}


def _comm_static(
    collective: str,
    dtype: str,
    n_in: int,
    n_out: int,
    pg_name: str,
    pg_desc: str,
    pg_size: int,
    rank_start: int,
    rank_stride: int,
) -> tuple[list[str], list[Any], bytes, bytes]:
    """What a record_param_comms node of one collective, dtype and group always holds: input types,
    shapes after the tensor's, and the encoded comm attrs before and after the per-call ones."""
    in_type, in_shapes = _split_meta(n_in)
    out_type, out_shapes = _split_meta(n_out)
    types = [DTYPES[dtype], "Tuple[Int,Bool]", "Tuple[String,String]", "Int", "String", in_type, out_type]
    types += ["Int", "Int", "Int"]
    rest_shapes = [[[], []], [[], []], [], [], in_shapes, out_shapes, [], [], []]
    head = [
        {"name": "collective_name", "type": "string", "value": collective},
        {"name": "dtype", "type": "string", "value": dtype},
    ]
    start_type = "uint64" if rank_start >= 0 else "int64"
    tail = [
        {"name": "global_rank_start", "type": start_type, "value": rank_start},
        {"name": "global_rank_stride", "type": start_type, "value": rank_stride},
        {"name": "pg_name", "type": "string", "value": pg_name},
        {"name": "pg_desc", "type": "string", "value": pg_desc},
        {"name": "pg_size", "type": "uint64", "value": pg_size},
    ]
    encoded_head = b"," + _encode(head)[1:-1] + b',{"name":"in_msg_nelems","type":"uint64","value":'
    return types, rest_shapes, encoded_head, b"," + _encode(tail)[1:-1]


def comm_node(
    node_id: int,
    collective: str,
    *,
    rf_id: int,
    seq: int,
    dtype: str,
    in_nelems: int,
    out_nelems: int,
    rank: int,
    pg_name: str,
    pg_desc: str,
    pg_size: int,
    rank_start: int,
    rank_stride: int,
    in_splits: list[int] | None = None,
    out_splits: list[int] | None = None,
    tensor_ids: tuple[int, int] = (0, 0),
    device: str = "cuda:0",
    p2p: bool = False,
    parent: int = THREAD_ID,
) -> dict[str, Any]:
    """A `record_param_comms` node; `rank` is the caller's group-local rank (send/recv: the peer's).

    `collective` is c10d's name: allreduce, all_to_allv, _allgather_base, _reduce_scatter_base,
    send, recv, ... `tensor_ids` are the ids of the input and output tensors (equal for in place).
    """
    itemsize = DTYPE_BYTES[dtype]
    ins = in_splits or []
    outs = out_splits or []
    static_key = (collective, dtype, len(ins), len(outs), pg_name, pg_desc, pg_size, rank_start, rank_stride)
    static = _COMM_STATIC.get(static_key)
    if static is None:
        static = _COMM_STATIC[static_key] = _comm_static(*static_key)
    types, rest_shapes, attrs_head, attrs_tail = static
    inputs = {
        "values": [
            [tensor_ids[0], tensor_ids[0], 0, in_nelems, itemsize, device],
            [seq, p2p],
            [pg_name, pg_desc],
            rank,
            collective,
            ins,
            outs,
            rank_start,
            rank_stride,
            pg_size,
        ],
        "shapes": [[in_nelems], *rest_shapes],
        "types": types,
        "strides": [[1], *rest_shapes],
    }
    outputs = {
        "values": [[tensor_ids[1], tensor_ids[1], 0, out_nelems, itemsize, device]],
        "shapes": [[out_nelems]],
        "types": types[:1],
        "strides": [[1]],
    }
    # split sizes as PyTorch writes them, "[1, 2, 3]": digits only, safe inside a JSON string
    middle = b'%d},{"name":"out_msg_nelems","type":"uint64","value":%d},{"name":"in_split_size","type":"string",'
    middle += b'"value":"%s"},{"name":"out_split_size","type":"string","value":"%s"}'
    extra = attrs_head + middle % (in_nelems, out_nelems, str(ins).encode(), str(outs).encode()) + attrs_tail
    attrs = _standard_attrs(rf_id, extra=extra)
    return _node(node_id, RECORD_PARAM_COMMS, parent, attrs, inputs, outputs)


def document(
    nodes: list[dict[str, Any]], *, pid: int = 0, time: str = "", start_ts: int = 0, finish_ts: int = 0
) -> dict[str, Any]:
    """The top-level object; `nodes` should start with thread_node() and end with process_node()."""
    return {"schema": SCHEMA, "pid": pid, "time": time, "start_ts": start_ts, "nodes": nodes, "finish_ts": finish_ts}


def dumps(doc: dict[str, Any]) -> bytes:
    """The document as compact JSON bytes."""
    return _encode(doc)


def compress(data: bytes, compresslevel: int = 6) -> bytes:
    """gzip with a fixed header (mtime 0, no file name): the same JSON gives the same bytes."""
    return gzip.compress(data, compresslevel=compresslevel, mtime=0)


def write(path: str | Path, doc: dict[str, Any], compresslevel: int = 6) -> int:
    """Write `doc` to `path` (gzip-compressed when it ends in .gz); the number of bytes written."""
    data = dumps(doc)
    path = Path(path)
    if path.name.endswith(".gz"):
        data = compress(data, compresslevel)
    path.write_bytes(data)
    return len(data)


__all__ = [
    "DTYPES",
    "SCHEMA",
    "comm_node",
    "compress",
    "document",
    "dumps",
    "op_node",
    "pg_init_node",
    "process_node",
    "rank_range",
    "tensor",
    "thread_node",
    "write",
]
