"""Hand-made jobs with their true parallelism class, for the class rule (queries/job_class.sql).

Each job is written as the traces a real run leaves (PyTorch execution traces through
tests/builders.write_pytorch_et_job, or Chakra .et without element types through write_et_job) and
ingested by the real ingest. They are realistic rather than typical: each sits where a rule that
reads shares and thresholds would go wrong (buckets of one size, a few all-gathers beside DDP, an
all-to-all done with send/recv, sequence parallelism's all-gathers, ...). The first eleven are the
cases of issue 20, the rest are the neighbours of each rule.

Sizes are elements of the call's dtype: BFloat16 activations and FSDP shards, Float (fp32) DDP
gradient buckets (mixed precision keeps fp32 parameters), Long/Int embedding ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.builders import Comm, write_et_job, write_pytorch_et_job

MIB = 1 << 20
BUCKET = 25 * MIB // 4  # a full 25 MiB DDP bucket of fp32 gradients
FIRST_BUCKET = MIB // 4  # DDP's first bucket: 1 MiB
ACTIVATION = 2048 * 4096  # s x h of one micro-batch, bf16
STEPS = 2

Calls = Callable[[int], Iterator[Comm]]


@dataclass
class Case:
    name: str
    true_class: str
    why: str
    world: int
    groups: dict[str, list[list[int]]]
    calls: Calls
    ranks: list[int] | None = None
    chakra: list[tuple[str, int]] = field(default_factory=list)  # Chakra .et: (comm_type, bytes) per rank

    def write(self, root: Path) -> None:
        if self.chakra:
            write_et_job(root / self.name, list(range(self.world)), self.chakra)
        else:
            write_pytorch_et_job(root / self.name, self.world, self.groups, self.calls, self.ranks)


# ---------------------------------------------------------------------------------------------
# Groups and the collectives every job is made of


def blocks(world: int, size: int) -> list[list[int]]:
    """Groups of `size` consecutive ranks (tensor-parallel groups, FSDP shard groups in a host)."""
    return [list(range(b, b + size)) for b in range(0, world, size)]


def strided(world: int, stride: int) -> list[list[int]]:
    """Groups of the ranks equal modulo `stride` (data-parallel groups across hosts)."""
    return [list(range(k, world, stride)) for k in range(stride)]


def group_of(rank: int, groups: list[list[int]]) -> list[int]:
    return next(g for g in groups if rank in g)


def ddp_buckets(params: int) -> list[int]:
    """DDP's gradient buckets of `params` fp32 elements: a 1 MiB first one, 25 MiB ones, the rest."""
    out = [min(FIRST_BUCKET, params)]
    while sum(out) < params:
        out.append(min(BUCKET, params - sum(out)))
    return out


def allreduces(sizes: list[int], group: str = "world", dtype: str = "Float") -> Iterator[Comm]:
    for size in sizes:
        yield Comm("ALL_REDUCE", size, dtype, group)


def loss(group: str = "world") -> Iterator[Comm]:
    """The loss and a metric: one fp32 scalar each (control calls, no data)."""
    yield Comm("ALL_REDUCE", 1, "Float", group)
    yield Comm("ALL_REDUCE", 1, "Float", group)


def uneven(members: list[int], rank: int, per_peer: int, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(in_splits, out_splits) of `rank` in an all-to-allv over `members` whose split matrix is
    M[i][j] = per_peer * (1 + (5i + 3j + seed) mod 4): rank i's in_splits[j] is rank j's out_splits[i]."""
    i = members.index(rank)
    n = len(members)

    def m(a: int, b: int) -> int:
        return per_peer * (1 + (5 * a + 3 * b + seed) % 4)

    return tuple(m(i, j) for j in range(n)), tuple(m(j, i) for j in range(n))


def alltoallv(members: list[int], rank: int, per_peer: int, seed: int, dtype: str, group: str) -> Comm:
    ins, outs = uneven(members, rank, per_peer, seed)
    return Comm("ALL_TO_ALL", sum(ins), dtype, group, in_splits=ins, out_splits=outs)


def pooled(members: list[int], rank: int, batch: int, group: str, backward: bool = False) -> Comm:
    """TorchRec's pooled-embedding all-to-all: rank i sends peer j its batch of i's tables (batch x
    dims_i, even per peer) and receives j's tables for its own batch (batch x dims_j, uneven); the
    backward pass sends the gradients back, the transposed matrix."""
    dims = [64 * (1 + k % 3) for k in range(len(members))]
    i = members.index(rank)
    ins = tuple(batch * dims[i] for _ in members)
    outs = tuple(batch * d for d in dims)
    if backward:
        ins, outs = outs, ins
    return Comm("ALL_TO_ALL", sum(ins), "Float", group, in_splits=ins, out_splits=outs)


def sparse_input(members: list[int], rank: int, group: str) -> Iterator[Comm]:
    """TorchRec's input distribution: the lengths (int32) and the ids (int64) of the sparse features."""
    n = len(members)
    yield Comm("ALL_TO_ALL", 512 * 26 * n, "Int", group)
    yield alltoallv(members, rank, 20_000, 1, "Long", group)


def fsdp_step(units: list[int], group: str, group_size: int, replicate: str | None = None) -> Iterator[Comm]:
    """FSDP (full shard): each unit's parameters gathered for forward and again for backward, its
    gradients reduce-scattered (and, HSDP, all-reduced across the replicas); sizes in bf16 elements."""
    shards = [-(-unit // group_size) for unit in units]
    for shard in shards:
        yield Comm("ALL_GATHER", shard, "BFloat16", group)
    for shard in reversed(shards):
        yield Comm("ALL_GATHER", shard, "BFloat16", group)
        yield Comm("REDUCE_SCATTER", shard * group_size, "BFloat16", group)
        if replicate is not None:
            yield Comm("ALL_REDUCE", shard, "BFloat16", replicate)


def pipeline_step(rank: int, stage: int, stages: int, stride: int, micro: int, layer: Calls) -> Iterator[Comm]:
    """1F1B's traffic of one rank: activations received from the stage before and sent to the next,
    gradients the other way; `layer` gives a stage's own collectives per micro-batch and pass."""
    for _ in range(micro):
        if stage > 0:
            yield Comm("RECV", ACTIVATION, "BFloat16", peer=rank - stride)
        yield from layer(0)
        if stage < stages - 1:
            yield Comm("SEND", ACTIVATION, "BFloat16", peer=rank + stride)
    for _ in range(micro):
        if stage < stages - 1:
            yield Comm("RECV", ACTIVATION, "BFloat16", peer=rank + stride)
        yield from layer(1)
        if stage > 0:
            yield Comm("SEND", ACTIVATION, "BFloat16", peer=rank - stride)


def tp_allreduces(layers: int, group: str = "tp") -> Calls:
    """Megatron tensor parallelism: two activation all-reduces per layer and pass."""

    def layer(_: int) -> Iterator[Comm]:
        for _ in range(2 * layers):
            yield Comm("ALL_REDUCE", ACTIVATION, "BFloat16", group)

    return layer


def steps(one: Calls) -> Calls:
    def calls(rank: int) -> Iterator[Comm]:
        for _ in range(STEPS):
            yield from one(rank)

    return calls


# ---------------------------------------------------------------------------------------------
# The cases


def _ddp_equal_buckets() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from allreduces([BUCKET] * 40)
        yield from loss()

    return Case("ddp_equal_buckets", "ddp", "issue 20: 40 equal 25 MiB buckets over 4 hosts", 32, {}, steps(one))


def _ddp_feature_allgather() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield Comm("ALL_GATHER", 512 * 256, "BFloat16")  # contrastive features of both towers
        yield Comm("ALL_GATHER", 512 * 256, "BFloat16")
        yield from allreduces([BUCKET])
        yield from loss()

    return Case(
        "ddp_feature_allgather", "ddp", "issue 20: DDP with two feature all-gathers per step", 16, {}, steps(one)
    )


def _moe_llm() -> Case:
    world = 32
    tp, ep = blocks(world, 4), strided(world, 4)

    def one(rank: int) -> Iterator[Comm]:
        members = group_of(rank, ep)
        for micro in range(2):
            for layer in range(4):
                for backward in (False, True):
                    yield Comm("ALL_REDUCE", ACTIVATION, "BFloat16", "tp")
                    seed = 8 * micro + 2 * layer + backward
                    yield alltoallv(members, rank, 4096 * 64, seed, "BFloat16", "ep")  # dispatch
                    yield alltoallv(members, rank, 4096 * 64, seed + 1, "BFloat16", "ep")  # combine
        yield from allreduces(ddp_buckets(40_000_000), "ep")
        yield from loss("ep")

    return Case(
        "moe_llm",
        "moe",
        "issue 20: MoE LLM: TP=4 in the host, experts across hosts",
        world,
        {"tp": tp, "ep": ep},
        steps(one),
    )


def _ranking_alltoall_by_p2p() -> Case:
    world = 16

    def one(rank: int) -> Iterator[Comm]:
        peers = [p for p in range(world) if p != rank]
        for kind, elems, dtype in (
            ("ids", 20_000, "Long"),
            ("pooled", 512 * 128, "Float"),
            ("grads", 512 * 128, "Float"),
        ):
            for peer in peers:
                yield Comm("SEND", elems + 8 * peer, dtype, peer=peer)
                yield Comm("RECV", elems + 8 * rank, dtype, peer=peer)
            if kind == "pooled":
                yield from allreduces(ddp_buckets(20_000_000))
        yield from loss()

    return Case(
        "ranking_alltoall_by_p2p",
        "ranking-ddp",
        "issue 20: embedding all-to-all done with send/recv to every peer",
        world,
        {},
        steps(one),
    )


def _ddp_zero1() -> Case:
    world = 16

    def one(rank: int) -> Iterator[Comm]:
        yield from allreduces(ddp_buckets(30_000_000))
        for _ in range(world):  # ZeroRedundancyOptimizer: each rank broadcasts the shard it updated
            yield Comm("BROADCAST", 30_000_000 // world, "Float")
        yield from loss()

    return Case(
        "ddp_zero1", "ddp", "issue 20: DDP with a ZeRO-1 optimizer (shards broadcast back)", world, {}, steps(one)
    )


def _ring_allreduce_p2p() -> Case:
    world = 8

    def one(rank: int) -> Iterator[Comm]:
        for bucket in ddp_buckets(30_000_000):
            for _ in range(2 * (world - 1)):  # reduce-scatter, then all-gather, around the ring
                yield Comm("SEND", -(-bucket // world), "Float", peer=(rank + 1) % world)
                yield Comm("RECV", -(-bucket // world), "Float", peer=(rank - 1) % world)
        yield from loss()

    return Case(
        "ring_allreduce_p2p",
        "ddp",
        "issue 20: the gradient ring all-reduce written as send/recv",
        world,
        {},
        steps(one),
    )


def _ring_only() -> Case:
    world = 4

    def one(rank: int) -> Iterator[Comm]:
        for _ in range(2 * (world - 1)):
            yield Comm("SEND", BUCKET // world, "Float", peer=(rank + 1) % world)
            yield Comm("RECV", BUCKET // world, "Float", peer=(rank - 1) % world)

    return Case("ring_only", "ddp", "a hand-written ring all-reduce and no collective at all", world, {}, steps(one))


def _tp_sequence_parallel() -> Case:
    world = 32

    def one(rank: int) -> Iterator[Comm]:
        for _ in range(2 * 4 * 2):  # micro-batches x layers x passes
            for _ in range(2):  # attention and MLP: gather the sequence, scatter it back
                yield Comm("ALL_GATHER", ACTIVATION // 8, "BFloat16", "tp")
                yield Comm("REDUCE_SCATTER", ACTIVATION, "BFloat16", "tp")
        yield from allreduces(ddp_buckets(60_000_000), "dp")
        yield from loss("dp")

    groups = {"tp": blocks(world, 8), "dp": strided(world, 8)}
    return Case(
        "tp_sequence_parallel",
        "llm-3d",
        "issue 20: TP=8 with sequence parallelism, DP across hosts",
        world,
        groups,
        steps(one),
    )


def _ddp_plain() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from allreduces(ddp_buckets(28_000_000))
        yield from loss()

    return Case("ddp_plain", "ddp", "issue 20: DDP, buckets of 1 MiB, 25 MiB and a remainder", 16, {}, steps(one))


def _fsdp_plain() -> Case:
    units = [65_536_000] + [25_165_824] * 6 + [65_536_000]

    def one(rank: int) -> Iterator[Comm]:
        yield from fsdp_step(units, "world", 16)
        yield from loss()

    return Case("fsdp_plain", "fsdp", "issue 20: FSDP, embedding, 6 blocks and the head as units", 16, {}, steps(one))


def _dlrm() -> Case:
    world = 16
    members = list(range(world))

    def one(rank: int) -> Iterator[Comm]:
        yield from sparse_input(members, rank, "world")
        yield pooled(members, rank, 512, "world")
        yield pooled(members, rank, 512, "world", backward=True)
        yield from allreduces(ddp_buckets(40_000_000))
        yield from loss()

    return Case(
        "dlrm_ranking",
        "ranking-ddp",
        "issue 20: DLRM: sparse input and pooled embeddings, dense DDP",
        world,
        {},
        steps(one),
    )


def _llm_3d(name: str = "llm_3d", ranks: list[int] | None = None, why: str = "issue 20: TP=8, PP=2, DP=2") -> Case:
    world, stride = 32, 16

    def one(rank: int) -> Iterator[Comm]:
        stage = rank // stride
        yield from pipeline_step(rank, stage, 2, stride, 4, tp_allreduces(2))
        shard = 13_000_000_000 // (2 * 8)
        yield Comm("REDUCE_SCATTER", shard, "BFloat16", "dp")
        yield Comm("ALL_GATHER", shard // 2, "BFloat16", "dp")
        yield from loss("dp")

    dp = [[s * stride + d * 8 + k for d in range(2)] for s in range(2) for k in range(8)]
    return Case(name, "llm-3d", why, world, {"tp": blocks(world, 8), "dp": dp}, steps(one), ranks)


def _hsdp_host_shards() -> Case:
    world = 32

    def one(rank: int) -> Iterator[Comm]:
        yield from fsdp_step([25_165_824] * 8, "shard", 8, replicate="replicate")
        yield from loss()

    groups = {"shard": blocks(world, 8), "replicate": strided(world, 8)}
    return Case(
        "hsdp_host_shards",
        "fsdp",
        "HSDP: shards in the host, replicas across: like TP+SP but for the replica all-reduce",
        world,
        groups,
        steps(one),
    )


def _fsdp_single_host() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from fsdp_step([8_000_000, 12_000_000, 12_000_000, 4_000_000], "world", 8)
        yield from loss()

    return Case(
        "fsdp_single_host", "fsdp", "FSDP on one host: the whole-job group is 8 consecutive ranks", 8, {}, steps(one)
    )


def _tp_single_host() -> Case:
    layer = tp_allreduces(4, "world")

    def one(rank: int) -> Iterator[Comm]:
        for _ in range(2):
            yield from layer(0)
            yield from layer(1)
        yield from loss()

    return Case(
        "tp_single_host", "llm-3d", "TP=8 over one host: bf16 activations of one size, nothing else", 8, {}, steps(one)
    )


def _ddp_single_host_equal() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from allreduces([FIRST_BUCKET] + [BUCKET] * 20)
        yield from loss()

    return Case(
        "ddp_single_host_equal",
        "ddp",
        "DDP on one host, 20 equal buckets: fp32 gradients, not activations",
        8,
        {},
        steps(one),
    )


def _pipeline_only() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from pipeline_step(rank, rank, 4, 1, 4, lambda _: iter(()))
        yield from loss()

    return Case("pipeline_only", "llm-3d", "a 4-stage pipeline and nothing else (GPipe)", 4, {}, steps(one))


def _pipeline_interleaved() -> Case:
    world = 4

    def one(rank: int) -> Iterator[Comm]:
        # Two model chunks per rank: the forward chain runs 0-1-2-3-0-1-2-3, so rank 3 passes to rank 0.
        for _ in range(4):
            for chunk in range(2):
                if (rank, chunk) != (0, 0):
                    yield Comm("RECV", ACTIVATION, "BFloat16", peer=(rank - 1) % world)
                if (rank, chunk) != (3, 1):
                    yield Comm("SEND", ACTIVATION, "BFloat16", peer=(rank + 1) % world)
            for chunk in range(2):
                if (rank, chunk) != (3, 1):
                    yield Comm("RECV", ACTIVATION, "BFloat16", peer=(rank + 1) % world)
                if (rank, chunk) != (0, 0):
                    yield Comm("SEND", ACTIVATION, "BFloat16", peer=(rank - 1) % world)
        yield from loss()

    return Case(
        "pipeline_interleaved",
        "llm-3d",
        "an interleaved pipeline: the stage chain wraps around, both ways",
        world,
        {},
        steps(one),
    )


def _pipeline_with_dp() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield Comm("BROADCAST", 4, "Float")
        stage, pair = rank % 2, rank - rank % 2
        for _ in range(2):
            if stage == 0:
                yield Comm("SEND", 4 * 32, "Float", peer=pair + 1)
            else:
                yield Comm("RECV", 4 * 32, "Float", peer=pair)
        for _ in range(2):
            if stage == 0:
                yield Comm("RECV", 4 * 32, "Float", peer=pair + 1)
            else:
                yield Comm("SEND", 4 * 32, "Float", peer=pair)
        yield from allreduces([2048, 64, 2048, 32], "dp")

    groups = {"dp": [[0, 2], [1, 3]]}
    return Case(
        "pipeline_with_dp",
        "llm-3d",
        "as sample pipeline_p2p: 2 stages x 2 replicas, DP in sub-groups",
        4,
        groups,
        steps(one),
    )


def _moe_fsdp() -> Case:
    world = 16
    members = list(range(world))

    def one(rank: int) -> Iterator[Comm]:
        units = [25_165_824] * 4
        yield from fsdp_step(units, "world", world)
        for layer in range(4):
            for backward in (False, True):
                yield Comm("ALL_TO_ALL", world, "Long")  # tokens per expert: one count per peer
                yield alltoallv(members, rank, 2048 * 32, 2 * layer + backward, "BFloat16", "world")
                yield alltoallv(members, rank, 2048 * 32, 2 * layer + backward + 1, "BFloat16", "world")
        yield from loss()

    return Case(
        "moe_fsdp", "moe", "MoE with FSDP (torchtitan): experts' all-to-all of bf16 tokens", world, {}, steps(one)
    )


def _moe_ddp_small() -> Case:
    world = 8
    members = list(range(world))

    def one(rank: int) -> Iterator[Comm]:
        for layer in range(2):
            yield Comm("ALL_TO_ALL", world, "Long")
            yield alltoallv(members, rank, 32 * 5, layer, "Float", "world")
            yield alltoallv(members, rank, 32 * 5, layer + 1, "Float", "world")
        for layer in range(2):
            yield alltoallv(members, rank, 32 * 5, layer + 2, "Float", "world")
            yield alltoallv(members, rank, 32 * 5, layer + 3, "Float", "world")
        yield Comm("ALL_REDUCE", 1056, "Float")  # the replicated gate

    return Case(
        "moe_ddp_small", "moe", "as sample moe_alltoall: one expert per rank, a replicated gate", world, {}, steps(one)
    )


def _ranking_fsdp() -> Case:
    world = 16
    members = list(range(world))

    def one(rank: int) -> Iterator[Comm]:
        yield from sparse_input(members, rank, "world")
        yield pooled(members, rank, 512, "world")
        yield from fsdp_step([13_107_200] * 8, "world", world)
        yield pooled(members, rank, 512, "world", backward=True)
        yield from loss()

    return Case(
        "ranking_fsdp",
        "fsdp",
        "a ranking model whose dense part is FSDP (the generator's ranking-fsdp)",
        world,
        {},
        steps(one),
    )


def _ranking_big_dense() -> Case:
    world = 16
    members = list(range(world))

    def one(rank: int) -> Iterator[Comm]:
        yield alltoallv(members, rank, 20_000, 1, "Long", "world")
        yield pooled(members, rank, 512, "world")
        yield from allreduces([BUCKET] * 40)
        yield pooled(members, rank, 512, "world", backward=True)
        yield from loss()

    return Case(
        "ranking_big_dense",
        "ranking-ddp",
        "a ranking model with a 1 GB dense tower: all-to-all 7% of calls",
        world,
        {},
        steps(one),
    )


def _control_only() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from loss()
        yield Comm("BARRIER", 1, "Float")

    return Case("control_only", "other", "only scalars: a loss, a metric, a barrier", 8, {}, steps(one))


def _broadcast_only() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        for size in (4096, 1_000_000, 6_000_000, 6_000_000, 250_000):
            yield Comm("BROADCAST", size, "BFloat16")

    return Case("broadcast_only", "other", "weights broadcast from one rank (serving), no gradients", 8, {}, steps(one))


def _llm_3d_partial() -> Case:
    return _llm_3d("llm_3d_partial", [0, 1, 16, 17], "the TP=8 x PP=2 x DP=2 job, 4 of its 32 ranks traced")


def _zero2() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        buckets = [50_000_000] * 4
        for bucket in buckets:
            yield Comm("REDUCE_SCATTER", bucket, "BFloat16")
        for bucket in buckets:
            yield Comm("ALL_GATHER", bucket // 16, "BFloat16")
        yield from loss()

    return Case(
        "zero2", "fsdp", "ZeRO-2: gradients reduce-scattered, parameters gathered back, once a step", 16, {}, steps(one)
    )


def _ddp_zero1_allgather() -> Case:
    def one(rank: int) -> Iterator[Comm]:
        yield from allreduces(ddp_buckets(30_000_000))
        for _ in range(4):
            yield Comm("ALL_GATHER", 30_000_000 // 64, "Float")  # updated shards gathered back
        yield from loss()

    return Case(
        "ddp_zero1_allgather",
        "ddp",
        "ZeRO-1 that gathers updated shards: no reduce-scatter to pair with",
        16,
        {},
        steps(one),
    )


def _tp_dp() -> Case:
    world = 16

    def one(rank: int) -> Iterator[Comm]:
        layer = tp_allreduces(4)
        for _ in range(2):
            yield from layer(0)
            yield from layer(1)
        yield from allreduces(ddp_buckets(20_000_000), "dp")
        yield from loss("dp")

    return Case(
        "tp_dp",
        "llm-3d",
        "TP=8 in each of 2 hosts, DP across them, no pipeline",
        world,
        {"tp": blocks(world, 8), "dp": strided(world, 8)},
        steps(one),
    )


def _tp4_dp2_single_host() -> Case:
    world = 8

    def one(rank: int) -> Iterator[Comm]:
        layer = tp_allreduces(4)
        for _ in range(2):
            yield from layer(0)
            yield from layer(1)
        yield from allreduces(ddp_buckets(20_000_000), "dp")
        yield from loss("dp")

    return Case(
        "tp4_dp2_single_host",
        "llm-3d",
        "TP=4 x DP=2 inside one host",
        world,
        {"tp": blocks(world, 4), "dp": strided(world, 4)},
        steps(one),
    )


def _moe_pipeline() -> Case:
    world, stride = 16, 8
    ep = blocks(world, 8)

    def one(rank: int) -> Iterator[Comm]:
        members = group_of(rank, ep)

        def layer(backward: int) -> Iterator[Comm]:
            for k in range(2):
                yield alltoallv(members, rank, 2048 * 32, 2 * k + backward, "BFloat16", "ep")
                yield alltoallv(members, rank, 2048 * 32, 2 * k + backward + 1, "BFloat16", "ep")

        yield from pipeline_step(rank, rank // stride, 2, stride, 2, layer)
        yield from loss()

    return Case(
        "moe_pipeline",
        "moe",
        "MoE in a 2-stage pipeline, experts within each stage's host",
        world,
        {"ep": ep},
        steps(one),
    )


def _chakra(name: str, true_class: str, why: str, world: int, calls: list[tuple[str, int]]) -> Case:
    return Case(name, true_class, why, world, {}, lambda _: iter(()), chakra=calls)


def _ranking_chakra() -> Case:
    calls = [("ALL_TO_ALL", 180_000), ("ALL_TO_ALL", 262_144), ("ALL_TO_ALL", 262_144)]
    calls += [("ALL_REDUCE", MIB)] + [("ALL_REDUCE", 25 * MIB)] * 3 + [("ALL_REDUCE", 7 * MIB)]
    return _chakra(
        "ranking_chakra", "ranking-ddp", "a ranking job as Chakra .et: no element types to read", 8, calls * STEPS
    )


def _fsdp_chakra() -> Case:
    units = [40_000_000, 25_000_000, 25_000_000, 10_000_000]
    calls = [("ALL_GATHER", -(-u // 8)) for u in units]
    for u in reversed(units):
        calls += [("ALL_GATHER", -(-u // 8)), ("REDUCE_SCATTER", -(-u // 8) * 8)]
    return _chakra("fsdp_chakra", "fsdp", "FSDP as Chakra .et: shards gathered, units scattered", 8, calls * STEPS)


def _ddp_chakra() -> Case:
    calls = [("ALL_REDUCE", 25 * MIB)] * 30
    return _chakra("ddp_chakra", "ddp", "DDP of equal buckets over 2 hosts as Chakra .et", 16, calls * STEPS)


CASES: list[Case] = [
    _ddp_equal_buckets(),
    _ddp_feature_allgather(),
    _moe_llm(),
    _ranking_alltoall_by_p2p(),
    _ddp_zero1(),
    _ring_allreduce_p2p(),
    _tp_sequence_parallel(),
    _ddp_plain(),
    _fsdp_plain(),
    _dlrm(),
    _llm_3d(),
    _hsdp_host_shards(),
    _fsdp_single_host(),
    _tp_single_host(),
    _ddp_single_host_equal(),
    _pipeline_only(),
    _pipeline_interleaved(),
    _pipeline_with_dp(),
    _moe_fsdp(),
    _moe_ddp_small(),
    _ranking_fsdp(),
    _ranking_big_dense(),
    _control_only(),
    _broadcast_only(),
    _llm_3d_partial(),
    _zero2(),
    _ddp_zero1_allgather(),
    _tp_dp(),
    _tp4_dp2_single_host(),
    _moe_pipeline(),
    _ranking_chakra(),
    _fsdp_chakra(),
    _ddp_chakra(),
    _ring_only(),
]
