"""Pairing: which backend work annotation belongs to which c10d dispatcher op.

Without `record_param_comms` a collective shows up twice: the `c10d::` op the caller dispatched
(`c10d::allreduce_`) and the work the backend ran for it (`gloo:all_reduce`), often on another
thread, often after the op returned. Each pair is one collective, so the parsers must pair them;
the traces do not link them reliably (PyTorch ET ctrl_deps hang the work under the op, under its
parent or under an unrelated node; Kineto has no link at all). The rules, in order:

1. Record-function ids. A work's record function opens right after its dispatcher's, so a work
   belongs to the not yet paired op of a fitting kind with the greatest smaller rf_id, in the same
   lane (thread for PyTorch ET, process for Kineto, whose gloo work runs on a worker thread).
   Works are taken in rf_id order. An op that started after its work cannot be its dispatcher.
2. For works that rule 1 left alone: the innermost op enclosing the work (by the tree or by time),
   then the earliest not yet paired op of a fitting kind in the lane that came before the work
   (first in, first out: a backend runs its work queue in order). A work with an rf_id only falls
   back on ops without one, so ids are never overruled by guesses.

"Fitting kind": the same comm_type, or a work that runs as another collective: gloo has no
reduce-scatter of one tensor (`_reduce_scatter_base_` runs `gloo:all_reduce` of the whole input)
and runs a barrier as an all-reduce.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

# (work comm_type, op comm_type) pairs where the work runs as another collective than the op.
WORK_RUNS_AS = frozenset({("ALL_REDUCE", "REDUCE_SCATTER"), ("ALL_REDUCE", "BARRIER")})


def work_fits(work_type: str, op_type: str) -> bool:
    return work_type == op_type or (work_type, op_type) in WORK_RUNS_AS


@dataclass(slots=True)
class Call:
    """A dispatcher op or a work annotation as pairing sees it.

    `lane`: the thread or process both must share (None: unknown, fits any). `order`: position in
    time or in the file, for "came before". `start`: host start time when the trace has one.
    """

    key: int
    comm_type: str
    lane: Hashable | None
    rf_id: int | None
    order: float
    start: float | None = None


class _Lane:
    """Ops of one comm_type and lane sorted by a key; finds the untaken one just below a key."""

    __slots__ = ("keys", "ops", "up")

    def __init__(self, items: list[tuple[float, Call]]) -> None:
        items.sort(key=lambda item: item[0])
        self.keys = [k for k, _ in items]
        self.ops = [op for _, op in items]
        self.up = list(range(len(items)))  # union-find: up[i] == i while untaken

    def _find(self, i: int) -> int:
        root = i
        while root >= 0 and self.up[root] != root:
            root = self.up[root]
        while i >= 0 and self.up[i] != i:
            self.up[i], i = root, self.up[i]
        return root

    def below(self, key: float) -> int | None:
        """Position of the untaken op with the greatest key smaller than `key`."""
        position = self._find(bisect.bisect_left(self.keys, key) - 1)
        return position if position >= 0 else None

    def take(self, position: int) -> None:
        self.up[position] = position - 1


def _fits_lane(a: Hashable | None, b: Hashable | None) -> bool:
    return a is None or b is None or a == b


def pair_works(
    ops: Sequence[Call],
    works: Sequence[Call],
    enclosing: Mapping[int, Sequence[int]] | None = None,
    slack: float = 0.0,
) -> dict[int, int]:
    """{work key: op key} by the rules above. `enclosing[work key]`: op keys around the work,
    innermost first. `slack`: tolerance of the start-time comparison (float timestamps)."""
    pairs: dict[int, int] = {}
    if not ops or not works:
        return pairs
    taken: set[int] = set()
    _by_rf_id(ops, works, pairs, taken, slack)
    rest = [w for w in works if w.key not in pairs]
    if rest:
        _fallback(ops, rest, enclosing or {}, pairs, taken, slack)
    return pairs


def _started_in_time(op: Call, work: Call, slack: float) -> bool:
    return op.start is None or work.start is None or op.start <= work.start + slack


def _by_rf_id(ops: Sequence[Call], works: Sequence[Call], pairs: dict[int, int], taken: set[int], slack: float) -> None:
    grouped: dict[tuple[str, Hashable | None], list[tuple[float, Call]]] = {}
    for op in ops:
        if op.rf_id is not None:
            grouped.setdefault((op.comm_type, op.lane), []).append((op.rf_id, op))
    lanes = {key: _Lane(items) for key, items in grouped.items()}
    with_ids = sorted((w for w in works if w.rf_id is not None), key=lambda w: (w.rf_id, w.order))
    for work in with_ids:
        assert work.rf_id is not None
        best: tuple[float, _Lane, int] | None = None
        for (op_type, lane_key), lane in lanes.items():
            if not work_fits(work.comm_type, op_type) or not _fits_lane(work.lane, lane_key):
                continue
            position = lane.below(work.rf_id)
            if position is not None and (best is None or lane.keys[position] > best[0]):
                best = (lane.keys[position], lane, position)
        if best is None:
            continue
        _, lane, position = best
        op = lane.ops[position]
        if _started_in_time(op, work, slack):
            lane.take(position)
            pairs[work.key] = op.key
            taken.add(op.key)


def _fallback(
    ops: Sequence[Call],
    works: list[Call],
    enclosing: Mapping[int, Sequence[int]],
    pairs: dict[int, int],
    taken: set[int],
    slack: float,
) -> None:
    by_key = {op.key: op for op in ops}
    # Untaken ops by kind and lane, in order, for "the earliest one before the work".
    queues: dict[tuple[str, Hashable | None], list[Call]] = {}
    for op in sorted(ops, key=lambda op: op.order):
        if op.key not in taken:
            queues.setdefault((op.comm_type, op.lane), []).append(op)
    heads = dict.fromkeys(queues, 0)

    def allowed(op: Call, work: Call) -> bool:
        return (
            op.key not in taken
            and (work.rf_id is None or op.rf_id is None)
            and work_fits(work.comm_type, op.comm_type)
            and _started_in_time(op, work, slack)
        )

    def earliest_before(work: Call) -> Call | None:
        best: Call | None = None
        for queue_key, queue in queues.items():
            op_type, lane_key = queue_key
            if not work_fits(work.comm_type, op_type) or not _fits_lane(work.lane, lane_key):
                continue
            head = heads[queue_key]
            while head < len(queue) and queue[head].key in taken:
                head += 1
            heads[queue_key] = head
            for op in queue[head:]:
                if op.order > work.order or (best is not None and op.order >= best.order):
                    break
                if allowed(op, work):
                    best = op
                    break
        return best

    for work in sorted(works, key=lambda w: w.order):
        around = (by_key[k] for k in enclosing.get(work.key, ()) if k in by_key)
        chosen = next((op for op in around if allowed(op, work)), None) or earliest_before(work)
        if chosen is not None:
            pairs[work.key] = chosen.key
            taken.add(chosen.key)
