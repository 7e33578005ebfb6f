"""A job's distinct collectives: the flows each one sends, and which collectives send exactly those flows.

A training job repeats itself: the same bucket all-reduced every iteration, the same unit gathered
in every layer. Indicators and fabric timings are sums over collectives of what each one's flows
do, so they are computed once per distinct collective (a `Shape`) and counted as often as it occurs.
Shapes are built from a Decomposition (every collective stamped, or one per distinct size with
`decompose(..., unique=True)`, the fleet's way), identified by a hash of their flows, and kept in
the order of that hash, so that one job replayed alone and the same job in a fleet add up their
numbers in the same order and agree to the last bit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.decompose import Decomposition
    from tracekit.replay.placement import Placement

FIELDS = ("src_rank", "dst_rank", "src_nic", "dst_nic", "channel", "qp", "link", "switch", "pxn", "bytes", "step")


@dataclass
class Shape:
    key: bytes
    collective_ids: list[int]
    comm_type: str
    algorithm: str
    protocol: str
    flows: dict[str, np.ndarray]  # FIELDS plus src_host, dst_host, src_rack, dst_rack, src_rail, dst_rail,
    # src_gpu, dst_gpu (global), dep_ptr, dep_idx (local to the shape); a switch end's rank, GPU, NIC
    # and rail are -1 (`switch`: base.TO_SWITCH / FROM_SWITCH), its host and rack the GPU's

    @property
    def count(self) -> int:
        return len(self.collective_ids)

    @property
    def size(self) -> int:
        return len(self.flows["bytes"])


@dataclass
class JobShapes:
    job: str
    world_size: int
    placement: Placement
    shapes: list[Shape] = field(default_factory=list)
    collectives: int = 0

    def network(self) -> Any:
        """The fabric Endpoints of the job's hosts."""
        hosts = max((int(max(s.flows["src_host"].max(), s.flows["dst_host"].max())) for s in self.shapes if s.size),
                    default=0) + 1  # fmt: skip
        return self.placement.endpoints(hosts)


def job_shapes(
    job: str, world: int, parts: Decomposition, comm_type: dict[int, str], placement: Placement
) -> JobShapes:
    """The distinct collectives of a decomposed job (see the module docstring)."""
    import numpy as np

    from tracekit.replay.algorithms.base import FROM_SWITCH, NET, TO_SWITCH

    where = placement.locate(np.arange(max(world, 1), dtype=np.int64))
    gpu_of = where["host"] * placement.gpus_per_host + where["gpu"]
    found: dict[bytes, Shape] = {}
    block_start = 0
    for stamped, ranks, name in zip(parts.flows, parts.rank_of, parts.algorithm_of, strict=True):
        first_id = block_start
        block_start += len(stamped.src)
        ids = stamped.collective
        if not len(ids):
            continue
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        ends = np.r_[starts[1:], len(ids)]
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            cid = int(ids[lo])
            rows = np.arange(lo, hi)
            if ranks.ndim == 2:
                src, dst = ranks[rows, stamped.src[lo:hi]], ranks[rows, stamped.dst[lo:hi]]
            else:
                src, dst = ranks[stamped.src[lo:hi]], ranks[stamped.dst[lo:hi]]
            host_src, host_dst = where["host"][src], where["host"][dst]
            network = stamped.link[lo:hi] == NET
            switch = stamped.switch[lo:hi]
            src_gpu, dst_gpu = gpu_of[src], gpu_of[dst]
            # a switch end has no rank and no GPU (the host's NVSwitch, or the switch a NIC attaches to)
            src, src_gpu = (np.where(switch == FROM_SWITCH, -1, a) for a in (src, src_gpu))
            dst, dst_gpu = (np.where(switch == TO_SWITCH, -1, a) for a in (dst, dst_gpu))
            local_src_nic, local_dst_nic = (
                stamped.src_nic[lo:hi].astype(np.int64),
                stamped.dst_nic[lo:hi].astype(np.int64),
            )
            ptr = stamped.dep_ptr[lo : hi + 1] - stamped.dep_ptr[lo]
            first = stamped.dep_idx[stamped.dep_ptr[lo] : stamped.dep_ptr[hi]]
            offset = first_id + lo
            flows = {
                "src_rank": src.astype(np.int64),
                "dst_rank": dst.astype(np.int64),
                "src_nic": np.where(network & (local_src_nic >= 0), host_src * placement.nics + local_src_nic, -1),
                "dst_nic": np.where(network & (local_dst_nic >= 0), host_dst * placement.nics + local_dst_nic, -1),
                "channel": stamped.channel[lo:hi].astype(np.int64),
                "qp": stamped.qp[lo:hi].astype(np.int64),
                "link": stamped.link[lo:hi].astype(np.int64),
                "pxn": stamped.pxn[lo:hi],
                "bytes": stamped.bytes[lo:hi].astype(np.int64),
                "step": stamped.step[lo:hi].astype(np.int64),
                "src_host": host_src,
                "dst_host": host_dst,
                "src_rack": where["rack"][src],
                "dst_rack": where["rack"][dst],
                "src_rail": np.where(local_src_nic >= 0, placement.rail_of_nic(np.maximum(local_src_nic, 0)), -1),
                "dst_rail": np.where(local_dst_nic >= 0, placement.rail_of_nic(np.maximum(local_dst_nic, 0)), -1),
                "src_gpu": src_gpu,
                "dst_gpu": dst_gpu,
                "switch": switch.astype(np.int64),
                "dep_ptr": ptr,
                "dep_idx": (first - offset).astype(np.int64),
            }
            choice = parts.choice.get(cid)
            algorithm = choice.algorithm if choice else name
            protocol = choice.protocol if choice else "Simple"
            kind = comm_type.get(cid, "")
            # the type too: a ring reduce-scatter sends the flows of a ring all-gather of its size
            key = signature(flows, algorithm, protocol) + kind.encode()
            shape = found.get(key)
            copies = parts.copies.get(cid, [cid])
            if shape is None:
                found[key] = Shape(key, list(copies), kind, algorithm, protocol, flows)
            else:
                shape.collective_ids.extend(copies)
    shapes = [found[k] for k in sorted(found)]
    return JobShapes(job, world, placement, shapes, sum(s.count for s in shapes))


def signature(flows: dict[str, np.ndarray], algorithm: str, protocol: str) -> bytes:
    """What identifies a collective's flows: members, NICs, channels, QPs, link classes, bytes, steps, dependencies."""
    digest = hashlib.blake2b(f"{algorithm}/{protocol}/{len(flows['bytes'])}".encode(), digest_size=20)
    for name in (*FIELDS, "dep_ptr", "dep_idx"):
        digest.update(flows[name].tobytes())
    return digest.digest()
