"""c10d ops: the arguments of each collective dispatcher op, as data.

Without `record_param_comms` (gloo, and any backend but NCCL/XCCL in torch 2.x) a collective is
known from its `c10d::` op, whose arguments say which tensors are sent and received, the peer of a
send/recv, and the split sizes of an all-to-all. PyTorch declares them in
torch/csrc/distributed/c10d/Ops.cpp; the table holds the leading arguments, whose names and
positions have not changed across versions (later ones - async_op, timeout - were added over
time and are not read). A trace that records the op schema (PyTorch ET `op_schema`) names the
arguments itself; a trace that does not (Kineto `Input Dims`/`Concrete Inputs`, ET without
op_schema) is read by position through this table.

The ProcessGroup argument of a c10d op is an opaque object, which no trace records. A functional
collective (`_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name)`, and
all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, broadcast, the coalesced ones)
calls the c10d op underneath it and names the group: its `group_name` argument, the `pg_name` of the
group in the process-group records. The c10d op runs in the group its functional op names.
"""

from __future__ import annotations

# stem (name without `c10d::`) -> leading argument names.
C10D_ARGS: dict[str, tuple[str, ...]] = {
    "allreduce_": ("tensors", "process_group", "reduce_op"),
    "allreduce_coalesced_": ("tensors", "process_group", "reduce_op"),
    "broadcast_": ("tensors", "process_group", "root_rank", "root_tensor"),
    "reduce_": ("tensors", "process_group", "reduce_op", "root_rank", "root_tensor"),
    "allgather_": ("output_tensors", "input_tensors", "process_group"),
    "_allgather_base_": ("output_tensor", "input_tensor", "process_group"),
    "allgather_coalesced_": ("output_lists", "input_list", "process_group"),
    "allgather_into_tensor_coalesced_": ("outputs", "inputs", "process_group"),
    "reduce_scatter_": ("output_tensors", "input_tensors", "process_group", "reduce_op"),
    "_reduce_scatter_base_": ("output_tensor", "input_tensor", "process_group", "reduce_op"),
    "reduce_scatter_tensor_coalesced_": ("outputs", "inputs", "process_group", "reduce_op"),
    "gather_": ("output_tensors", "input_tensors", "process_group", "root_rank"),
    "scatter_": ("output_tensors", "input_tensors", "process_group", "root_rank"),
    "alltoall_": ("output_tensors", "input_tensors", "process_group"),
    "alltoall_base_": ("output", "input", "process_group", "output_split_sizes", "input_split_sizes"),
    "barrier": ("tensor", "process_group", "device_ids"),
    "send": ("tensors", "process_group", "dstRank", "tag"),
    "recv_": ("tensors", "process_group", "srcRank", "tag"),
    "recv_any_source_": ("tensors", "process_group", "tag"),
}

# For ops the table does not know (newer or renamed ones): the families that take (output, input).
_OUTPUT_FIRST_FAMILIES = (
    "alltoall",
    "allgather",
    "_allgather",
    "reduce_scatter",
    "_reduce_scatter",
    "gather",
    "scatter",
)
# Ops whose one tensor (list) is both what the rank passes in and what it gets back. recv_ is one
# too: by Chakra's convention the message is its input, and it is the output it receives.
IN_PLACE = frozenset({"allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_", "recv_", "recv_any_source_"})
# Ops on one input and one output tensor: their per-rank shards are equal by definition.
_EVEN_SHARD_FAMILIES = ("_allgather_base", "_reduce_scatter_base", "allgather_into_tensor", "reduce_scatter_tensor")
# Argument names of the peer of a send/recv, across versions and spellings.
PEER_ARGS = frozenset({"dstRank", "srcRank", "dst", "src", "peer"})
IN_SPLITS_ARG = "input_split_sizes"
OUT_SPLITS_ARG = "output_split_sizes"
# The argument of a functional collective that names its process group (its last string argument).
GROUP_NAME_ARG = "group_name"


def arg_names(stem: str) -> tuple[str, ...] | None:
    """The leading argument names of c10d op `stem`, or None for an op the table does not know."""
    return C10D_ARGS.get(stem)


def is_output_arg(name: str) -> bool:
    return name.startswith("output")


def lists_output_first(stem: str) -> bool:
    """Whether the op's first tensor argument is its output (all-gather, reduce-scatter, ...)."""
    names = C10D_ARGS.get(stem)
    if names is not None:
        return is_output_arg(names[0])
    return stem.startswith(_OUTPUT_FIRST_FAMILIES)


def is_in_place(stem: str) -> bool:
    return stem in IN_PLACE


def has_even_shards(stem: str) -> bool:
    return stem.startswith(_EVEN_SHARD_FAMILIES)


def arg_position(stem: str, names: frozenset[str] | str) -> int | None:
    """Position of the first argument of `stem` named in `names`, from the table."""
    wanted = {names} if isinstance(names, str) else names
    for position, name in enumerate(C10D_ARGS.get(stem, ())):
        if name in wanted:
            return position
    return None
