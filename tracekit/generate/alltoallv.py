"""The per-peer sizes of a generated job's all-to-allv calls.

An all-to-allv's per-peer sizes are one matrix per call and group, M[i][j] = elements rank i sends
rank j = (its per-peer mean) x r_i x c_j, with r (each rank's volume) and c (each peer's share, mean 1)
lognormal by the model's `uneven_sigma`, drawn per job and call: rank i's in_splits is row i, its
out_splits column i, so every rank's splits agree with its peers' (the embeddings' backward
all-to-allv sends the forward's matrix transposed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.parsers.common.names import DTYPE_BYTES
from tracekit.writers.chakra_et import int64_list_fields

if TYPE_CHECKING:
    from tracekit.generate.jobs import JobSpec


@dataclass(frozen=True, eq=False)
class Splits:
    """One rank's share of an all-to-allv (member `member` of `matrix`): elements it sends to /
    receives from each group member (ins, outs), their sums, and the same as the serialized `attr`
    fields of a Chakra Node (in_split_size, out_split_size)."""

    matrix: SplitMatrix
    member: int

    @property
    def ins(self) -> list[int]:
        return list(self.matrix.matrix[self.member].tolist())

    @property
    def outs(self) -> list[int]:
        return list(self.matrix.matrix[:, self.member].tolist())

    @property
    def members(self) -> int:
        return len(self.matrix.matrix)

    @property
    def sent(self) -> int:
        return int(self.matrix.row_sums[self.member])

    @property
    def received(self) -> int:
        return int(self.matrix.column_sums[self.member])

    @property
    def fields(self) -> bytes:
        return self.matrix.fields(self.member)


class SplitMatrix:
    """One all-to-allv of a group: M[i][j] elements from member i to member j (see the module
    docstring), drawn from the job's seed and the call's key."""

    def __init__(self, seed: int, key: str, members: int, per_rank: int, sigma: float) -> None:
        rng = random.Random(f"splits:{seed}:{key}")
        volume = np.array([math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else 1.0 for _ in range(members)])
        share = np.array([math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else 1.0 for _ in range(members)])
        share /= share.mean()
        self._set(np.rint(per_rank / members * np.outer(volume, share)).astype(np.int64))

    def _set(self, matrix: np.ndarray) -> None:
        self.matrix = matrix
        self.row_sums, self.column_sums = matrix.sum(axis=1), matrix.sum(axis=0)
        self._busiest = self._busiest_member()
        self._fields: list[bytes] | None = None

    def transposed(self) -> SplitMatrix:
        out = object.__new__(SplitMatrix)
        out._set(self.matrix.T)
        return out

    def splits(self, member: int) -> Splits:
        return Splits(self, member)

    def fields(self, member: int) -> bytes:
        """Member's in_split_size and out_split_size as serialized Node `attr` fields."""
        if self._fields is None:
            ins = int64_list_fields("in_split_size", self.matrix)
            outs = int64_list_fields("out_split_size", self.matrix.T)
            self._fields = [a + b for a, b in zip(ins, outs, strict=True)]
        return self._fields[member]

    def bus_bytes(self, itemsize: int) -> float:
        """The most any member's link carries: what it sends or receives from the others, or its
        input's bus bytes (S x (n-1)/n), whichever is more."""
        return self._busiest * itemsize

    def _busiest_member(self) -> float:
        m = self.matrix
        n = len(m)
        own = np.diagonal(m)
        sent, received = self.row_sums - own, self.column_sums - own
        by_definition = self.row_sums * (n - 1) / n
        return float(max(sent.max(), received.max(), by_definition.max()))


class Alltoalls:
    """The job's embedding all-to-allv calls, one SplitMatrix per (iteration, call, group), made
    once and shared by the ranks (the backward call sends the forward's matrix transposed)."""

    def __init__(self, spec: JobSpec, p: dict[str, Any]) -> None:
        self.seed, self.p = spec.seed, p
        self.made: dict[tuple[Any, ...], SplitMatrix] = {}

    def matrix(self, iteration: int, call: str, group: int, members: int, backward: bool = False) -> SplitMatrix:
        key = (iteration, call, group, backward)
        found = self.made.get(key)
        if found is None:
            if backward:
                found = self.matrix(iteration, call, group, members).transposed()
            else:
                p = self.p
                ids = call == "input"
                per_rank = (p["input_bytes"] if ids else p["a2a_bytes"]) // DTYPE_BYTES[self.dtype(ids)]
                found = SplitMatrix(self.seed, f"{iteration}:{call}:{group}", members, per_rank, p["uneven_sigma"])
            self.made[key] = found
        return found

    def dtype(self, ids: bool) -> str:
        return str(self.p["ids_dtype"] if ids else self.p["a2a_dtype"])
