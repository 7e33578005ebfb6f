"""Names: which events are collectives, of what kind, on what element type, by which backend.

Each trace format spells the same things differently (`allreduce`, `nccl:all_reduce`,
`c10d::allreduce_`, `ncclKernel_AllReduce_RING_LL_Sum_float`; `Float`, `Tensor(float)`, `f32`);
these functions map them onto the data model's vocabulary so that the same collective traced in
two formats gives the same row. Every parser and writer takes its names from here.
"""

from __future__ import annotations

import re

from tracekit.schema import COMM_TYPE_TABLE

# The work annotation a c10d backend records around each collective it runs (`nccl:all_reduce`,
# `gloo:broadcast`, `xccl:all_gather` on Intel GPUs), whatever the profiler generation.
BACKEND_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:", "xccl:")
# Every other backend names its work the same way, a lowercase word and one colon: `ncclx:`, `rccl:`,
# `hccl:`, `mccl:`, `nccl2:` (the names PyTorch's Flight Recorder analyzer accepts, torch 2.13
# torch/distributed/flight_recorder/components/types.py `Op`). Two colons are a namespace (`aten::`).
_ANY_BACKEND_PREFIX = re.compile(r"[a-z][a-z0-9_]{0,31}:(?!:)")
# The dispatcher op of a collective (`c10d::allreduce_`): its name without the namespace is how
# profiler (Kineto) rows name it, so rows of every format carry the short name.
C10D_PREFIX = "c10d::"
# The op PyTorch wraps around each collective it records the parameters of (NCCL, XCCL).
RECORD_PARAM_COMMS = "record_param_comms"
# The functional collectives (`torch.distributed._functional_collectives`, DTensor, compiled code):
# `_c10d_functional::all_reduce(input, reduce_op, group_name)` runs the c10d op underneath it and,
# unlike that op, names its process group.
FUNCTIONAL_PREFIX = "_c10d_functional::"
# The metadata node whose input lists every process group of the rank: its name as PyTorch writes
# it, and the part parsers look for.
PG_INIT_NAME = "## process_group:init ##"
PG_INIT_MARK = "process_group:init"
# The Chakra node attributes (tracekit's own: Chakra defines none) holding an all-to-allv's split
# sizes in elements, named after the `collectives` columns they fill (tracekit/writers/chakra_et.py).
# Chakra attributes of an all-to-allv's split lists: the names the PyTorch ET gives them
# (record_param_comms), elements per peer in group order (Chakra itself defines none).
SPLIT_ATTRS = ("in_split_size", "out_split_size")


def is_backend_annotation(name: str) -> bool:
    """A backend's work annotation (`nccl:all_reduce`, `gloo:send`, `xccl:broadcast`; under another
    backend's prefix, `rccl:all_gather`, only when it names a collective)."""
    if name.startswith(BACKEND_PREFIXES):
        return True
    return _ANY_BACKEND_PREFIX.match(name) is not None and comm_type_of(name) is not None


def backend_prefix(name: str) -> str | None:
    """The backend a work annotation names (`nccl:all_reduce` -> `nccl`), or None."""
    match = _ANY_BACKEND_PREFIX.match(name)
    return match.group(0)[:-1] if match else None


def c10d_stem(name: str) -> str:
    """`c10d::allreduce_` -> `allreduce_`; other names unchanged."""
    return name.removeprefix(C10D_PREFIX)


# Chakra CollectiveCommType numbers (schemas/et_def.proto) onto the data model's comm_type, and
# PyTorch's c10d name of each comm_type for writers: both from tracekit.schema.COMM_TYPE_TABLE.
CHAKRA_COMM_TYPES: dict[int, str] = {code: c.name for c in COMM_TYPE_TABLE for code in c.chakra_codes}
C10D_NAMES: dict[str, str] = {c.name: c.c10d for c in COMM_TYPE_TABLE if c.c10d is not None}

# Checked in order: longer stems first, so that "reducescatter" is not taken for "reduce".
_NAME_RULES: tuple[tuple[str, str], ...] = tuple(
    sorted(((stem, c.name) for c in COMM_TYPE_TABLE for stem in (c.stem, *c.other_stems)), key=lambda r: -len(r[0]))
)

_PREFIXES = (*BACKEND_PREFIXES, C10D_PREFIX)


def _squash(name: str) -> str:
    name = name.strip().split(" ", 1)[0].lower()
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    else:
        match = _ANY_BACKEND_PREFIX.match(name)
        if match:
            name = name[match.end() :]
    return name.replace("_", "").replace("-", "")


def comm_type_of(name: str | None) -> str | None:
    """The comm_type of a collective named as c10d, a backend annotation or a c10d:: op does.

    Returns None for names that are not a communication operation (`wait`, `coalesced`, ...).
    """
    if not name:
        return None
    squashed = _squash(name)
    for stem, comm_type in _NAME_RULES:
        if squashed.startswith(stem):
            return comm_type
    return None


def functional_comm_type(name: str) -> str | None:
    """The comm_type of a functional collective (`_c10d_functional::all_to_all_single`); None for
    other names and for its non-communication ops (`wait_tensor`, `_wrap_tensor_autograd`)."""
    if not name.startswith(FUNCTIONAL_PREFIX):
        return None
    return comm_type_of(name[len(FUNCTIONAL_PREFIX) :])


def is_uneven_name(name: str | None) -> bool:
    """True for the variable-split all-to-all (`all_to_allv`, `alltoallv`)."""
    return bool(name) and _squash(name or "").startswith("alltoallv")


# c10 ScalarType names and their sizes in bytes.
DTYPE_BYTES: dict[str, int] = {
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "QInt8": 1,
    "QUInt8": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "Short": 2,
    "UInt16": 2,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "UInt32": 4,
    "QInt32": 4,
    "Float": 4,
    "ComplexHalf": 4,
    "Long": 8,
    "UInt64": 8,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}

# C++ spellings (PyTorch ET `Tensor(<type>)`, Kineto `Input type`) and NCCL kernel suffixes.
_DTYPE_ALIASES: dict[str, str] = {
    "float": "Float",
    "float32": "Float",
    "f32": "Float",
    "double": "Double",
    "float64": "Double",
    "f64": "Double",
    "c10::half": "Half",
    "half": "Half",
    "float16": "Half",
    "f16": "Half",
    "c10::bfloat16": "BFloat16",
    "bfloat16": "BFloat16",
    "__nv_bfloat16": "BFloat16",
    "bf16": "BFloat16",
    "long": "Long",
    "long int": "Long",
    "long long": "Long",
    "int64_t": "Long",
    "int64": "Long",
    "i64": "Long",
    "int": "Int",
    "int32_t": "Int",
    "int32": "Int",
    "i32": "Int",
    "short": "Short",
    "short int": "Short",
    "int16": "Short",
    "unsigned char": "Byte",
    "uint8_t": "Byte",
    "uint8": "Byte",
    "u8": "Byte",
    "signed char": "Char",
    "int8_t": "Char",
    "int8": "Char",
    "i8": "Char",
    "bool": "Bool",
    "uint32_t": "UInt32",
    "u32": "UInt32",
    "uint64_t": "UInt64",
    "u64": "UInt64",
    "c10::complex<float>": "ComplexFloat",
    "c10::complex<double>": "ComplexDouble",
    "c10::complex<c10::half>": "ComplexHalf",
    "c10::float8_e4m3fn": "Float8_e4m3fn",
    "c10::float8_e5m2": "Float8_e5m2",
    "f8e4m3": "Float8_e4m3fn",
    "f8e5m2": "Float8_e5m2",
}
_CANONICAL = {name.lower(): name for name in DTYPE_BYTES}
_TENSOR_TYPE = re.compile(r"^Tensor\((.*)\)$")


def normalize_dtype(spelling: str | None) -> str | None:
    """c10 ScalarType name for a dtype as any format spells it; None when unknown."""
    if not spelling:
        return None
    text = spelling.strip()
    match = _TENSOR_TYPE.match(text)
    if match:
        text = match.group(1).strip()
    key = text.lower()
    if key.startswith("torch."):
        key = key[6:]
    return _CANONICAL.get(key) or _DTYPE_ALIASES.get(key)


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a normalized dtype."""
    return DTYPE_BYTES.get(dtype) if dtype else None


def elements(nbytes: int | None, dtype: str | None) -> int | None:
    """nbytes ÷ element size, or None when either is unknown or the size does not divide nbytes."""
    size = dtype_bytes(dtype)
    return nbytes // size if nbytes is not None and size is not None and nbytes % size == 0 else None


def times(elems: int | None, dtype: str | None) -> int | None:
    """elems × element size, or None when either is unknown."""
    size = dtype_bytes(dtype)
    return elems * size if elems is not None and size is not None else None


_KERNEL_COLLS: dict[str, str | None] = {
    "AllReduce": "ALL_REDUCE",
    "AllGather": "ALL_GATHER",
    "AllGatherV": "ALL_GATHER",
    "ReduceScatter": "REDUCE_SCATTER",
    "Broadcast": "BROADCAST",
    "Reduce": "REDUCE",
    # SendRecv kernels run send, recv and all-to-all alike: the kernel alone cannot tell.
    "SendRecv": None,
    "Generic": None,
}


def is_nccl_kernel(name: str) -> bool:
    return name.startswith(("ncclKernel_", "ncclDevKernel_"))


def parse_nccl_kernel(name: str) -> tuple[str | None, str | None]:
    """(comm_type, dtype) as far as an NCCL kernel name tells them.

    The dtype is the kernel's specialisation (signed types run as unsigned, send/recv as int8),
    so callers mark it as inferred, and never take byte counts from a kernel name.
    """
    if not is_nccl_kernel(name):
        return None, None
    parts = name.split("(", 1)[0].split("_")
    comm_type = _KERNEL_COLLS.get(parts[1]) if len(parts) > 1 else None
    dtype = None
    if comm_type in ("ALL_REDUCE", "REDUCE_SCATTER", "REDUCE") and len(parts) > 2:
        # Types can contain underscores (int8_t, __nv_bfloat16): take what follows the red-op.
        for op in ("Sum", "Prod", "Min", "Max", "PreMulSum", "SumPostDiv"):
            if op in parts:
                tail = "_".join(parts[parts.index(op) + 1 :])
                dtype = normalize_dtype(tail.split("_RING")[0].split("_TREE")[0])
                break
    return comm_type, dtype


def backend_name(config: object) -> str | None:
    """The backend(s) of a PyTorch `backend_config`: 'cuda:nccl' -> 'nccl'; 'cpu:gloo,cuda:nccl' -> 'gloo,nccl'."""
    if not isinstance(config, str) or not config.strip():
        return None
    names: list[str] = []
    for part in config.split(","):
        name = part.split(":")[-1].strip()
        if name and name not in names:
            names.append(name)
    return ",".join(names) or None
