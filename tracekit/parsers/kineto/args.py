"""Kineto argument names, as data: what each profiler generation calls the facts a row needs.

Generations (research note chakra-formats.md, "Generations observed"):

* G1 (2023): no communication args; `record_param_comms` has only `Input Dims`/`Input type`.
* G2 (early 2024): the comm args below on `record_param_comms` only, the group as an int
  `Process Group ID`.
* G3 (mid 2024): the args on both `record_param_comms` and the NCCL kernel, the group as
  `Process Group Name` (+ description, `Process Group Ranks`).
* G4 (2025-26): as G3 plus `Rank` and `Concrete Inputs`; `Record function id` written as 0.
* G5 (2026): as G4 plus `Seq`, `Comms Id`, `Is asynchronized op` and, when tensor addresses are
  recorded, `Input Tensors start` / `Output Tensors start` (torch/csrc/profiler/util.cpp
  saveNcclMeta; pytorch/kineto#1294, #1299, pytorch/pytorch#169416). `Seq` is the collective's
  number in its process group, the same on every rank (for a send or recv, the rank's own count of
  point-to-point ops in the group), written only when it is known (>= 0): it fills `seq`, which
  matches a collective's rows across ranks. `Comms Id` is PyTorch's hash of (group name, Seq, p2p
  or not, rank start, rank stride, group size), written only with `Seq`: a key the row already
  holds as (pg_name, seq), so it is checked (an unsigned 64-bit integer) and not stored.
  `Is asynchronized op` (0 or 1) says whether the op was issued async: the data model has no
  column for it, so it is checked and not stored. The tensors' start addresses say nothing of
  what goes on the wire: bounded as every argument's text is (decode.bound_args), not parsed.

c10d dispatcher ops carry no comm args in any generation: `Input Dims`, `Input type` and
`Concrete Inputs` list their arguments by position (tracekit.parsers.common.c10d names them).
"""

from __future__ import annotations

COLLECTIVE_NAME = "Collective name"
DTYPE = "dtype"
IN_ELEMS = "In msg nelems"
OUT_ELEMS = "Out msg nelems"
GROUP_SIZE = "Group size"
IN_SPLITS = "In split size"
OUT_SPLITS = "Out split size"
SEQ = "Seq"
COMMS_ID = "Comms Id"
IS_ASYNC = "Is asynchronized op"
# The group an op ran in: G3+ name first, then G2's id.
PG_NAME = ("Process Group Name", "Process Group ID")
PG_RANKS = "Process Group Ranks"
# The caller's group-local rank, or for send/recv the peer's.
RANK = "Rank"
# Global peer of a send (dst) or recv (src); the other one is tried when the expected is absent.
PEER = {"SEND": ("Dst Rank", "Src Rank"), "RECV": ("Src Rank", "Dst Rank")}
RF_ID = "Record function id"
EXTERNAL_ID = "External id"
CORRELATION = "correlation"
INPUT_DIMS = "Input Dims"
INPUT_TYPES = "Input type"
CONCRETE_INPUTS = "Concrete Inputs"
