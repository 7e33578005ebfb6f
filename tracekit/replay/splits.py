"""All-to-allv: the split lists a collective's ranks recorded, as the transfers they describe (sparse).

A collective over n ranks records up to 2n lists of n splits (in elements): a sender's in_splits
(what it sends each member) and a receiver's out_splits (what it receives from each). The lists are
read as arrays (Arrow's flat values, no Python object per split) and only their non-zero splits
become transfers, so the work and memory of a collective follow its lists and its non-zero
splits, never n × n cells: all-zero splits over thousands of ranks cost what reading them costs.

Rules (as the replay has always read them): a sender's list is used whole when it is usable (n
splits, none null or negative, an element size known); a receiver's out_splits fill the pairs
whose sender gave none; where both speak and disagree the sender's are used. A split whose bytes
(split × element size, compared without overflow) pass MAX_BYTES is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.errors import InputError
from tracekit.parsers.common.names import dtype_bytes
from tracekit.replay.collectives import MAX_BYTES

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.replay.layout import GroupLayout

UNUSABLE = "{column} unusable (length != group size, negative, or no element size)"
DISAGREE = "a sender's in_splits and its receiver's out_splits disagree: the sender's are used"
UNKNOWN = "pairs between ranks without trace rows are unknown and left out"


@dataclass
class Transfers:
    """Non-zero transfers between positions of the group, ordered by (src, dst); src != dst."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray


@dataclass
class _Lists:
    """One split column's usable lists: the position that recorded each, and their non-zero entries."""

    owners: np.ndarray  # positions with a usable list (one list each)
    owner: np.ndarray  # per non-zero entry: the position whose list holds it
    member: np.ndarray  # per non-zero entry: the position it names
    bytes: np.ndarray  # per non-zero entry: split × element size


def split_transfers(
    parts: pl.DataFrame | None, layout: GroupLayout, issues: dict[str, int], where: str
) -> Transfers | None:
    """The transfers the rows' split lists describe (see the module docstring); None when no row has
    usable splits. `issues` counts what was unusable or disagreed; `where` names the collective."""
    import numpy as np

    if parts is None or not parts.height:
        return None
    n = layout.n
    positions = layout.positions(parts["rank"].to_numpy().astype(np.int64)).astype(np.int64)
    elem = _element_sizes(parts)
    sent = _lists(parts, "in_splits", positions, elem, layout, issues, where, last_wins=True)
    received = _lists(parts, "out_splits", positions, elem, layout, issues, where, last_wins=False)
    if not sent.owners.size and not received.owners.size:
        return None
    s_keys = sent.owner * n + sent.member  # sender -> member
    r_keys = received.member * n + received.owner  # member (the sender) -> receiver
    s_order = np.argsort(s_keys, kind="stable")
    s_keys, s_bytes = s_keys[s_order], sent.bytes[s_order]
    from_sender = np.isin(received.member, sent.owners)
    for _ in range(_disagreeing(s_keys, s_bytes, received, from_sender, n)):
        _count(issues, DISAGREE)
    if sent.owners.size < n and received.owners.size < n:
        _count(issues, UNKNOWN)
    keys = np.concatenate([s_keys, r_keys[~from_sender]])
    values = np.concatenate([s_bytes, received.bytes[~from_sender]])
    src, dst = keys // n, keys % n
    keep = src != dst
    order = np.argsort(keys[keep], kind="stable")
    return Transfers(src[keep][order], dst[keep][order], values[keep][order])


def _disagreeing(s_keys: np.ndarray, s_bytes: np.ndarray, received: _Lists, from_sender: np.ndarray, n: int) -> int:
    """How many receivers have a split that differs from their sender's (a split absent from the
    non-zero entries is 0): counted where both the sender's and the receiver's lists are usable."""
    import numpy as np

    def lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        out = np.zeros(len(wanted), dtype=np.int64)
        if len(keys):
            found = keys[at] == wanted
            out[found] = values[at[found]]
        return out

    r_keys = received.member * n + received.owner
    order = np.argsort(r_keys, kind="stable")
    r_sorted, r_bytes = r_keys[order], received.bytes[order]
    wrong_r = lookup(s_keys, s_bytes, r_keys[from_sender]) != received.bytes[from_sender]
    to_receiver = np.isin(s_keys % n, received.owners)
    wrong_s = lookup(r_sorted, r_bytes, s_keys[to_receiver]) != s_bytes[to_receiver]
    receivers = np.concatenate([received.owner[from_sender][wrong_r], (s_keys[to_receiver] % n)[wrong_s]])
    return int(np.unique(receivers).size)


def _lists(
    parts: pl.DataFrame,
    column: str,
    positions: np.ndarray,
    elem: np.ndarray,
    layout: GroupLayout,
    issues: dict[str, int],
    where: str,
    last_wins: bool,
) -> _Lists:
    """The usable lists of `column` and their non-zero entries, read from Arrow's flat values."""
    import numpy as np
    import pyarrow as pa

    n = layout.n
    empty = np.zeros(0, dtype=np.int64)
    arrow = parts[column].to_arrow()
    if isinstance(arrow, pa.ChunkedArray):
        arrow = arrow.combine_chunks()
    if arrow.null_count == len(arrow):
        return _Lists(empty, empty, empty, empty)
    offsets = np.asarray(arrow.offsets).astype(np.int64)
    child = arrow.values
    flat = child.fill_null(-1) if child.null_count else child
    values = np.asarray(flat.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)
    rows = len(arrow)
    present = ~np.asarray(arrow.is_null())
    # A row is usable when its list has n splits, none null or negative, and its element size is known.
    usable = present & (np.diff(offsets) == n) & (elem > 0)
    bad = _row_of(offsets, np.flatnonzero(values < 0), rows)  # nulls were filled with -1
    usable[bad[(bad >= 0) & (bad < rows)]] = False
    unusable = int((present & ~usable).sum())
    for _ in range(unusable):
        _count(issues, UNUSABLE.format(column=column))
    chosen = _one_per_position(np.flatnonzero(usable), positions, last_wins)
    take = np.zeros(rows, dtype=bool)
    take[chosen] = True
    nonzero = np.flatnonzero(values != 0)
    row = _row_of(offsets, nonzero, rows)
    inside = (row >= 0) & (row < rows)
    inside[inside] &= take[row[inside]] & (nonzero[inside] < offsets[row[inside] + 1])
    nonzero, row = nonzero[inside], row[inside]
    split, size = values[nonzero], elem[row]
    over = np.flatnonzero(split > MAX_BYTES // np.maximum(size, 1))
    if over.size:
        i = int(over[0])
        value, e = int(split[i]), int(size[i])
        rank = int(parts["rank"][int(row[i])])
        raise InputError(
            f"{where}: rank {rank}'s {column} send {value:,} elements of {e} bytes, {value * e:,} bytes, "
            f"past the bound of {MAX_BYTES:,} bytes (1 PiB) a transfer may move"
        )
    member = layout.position_of_member[nonzero - offsets[row]].astype(np.int64)
    return _Lists(positions[chosen], positions[row], member, split * size)


def _row_of(offsets: np.ndarray, index: np.ndarray, rows: int) -> np.ndarray:
    """The row whose list holds each flat `index` (-1 before the first list, `rows` past the last)."""
    import numpy as np

    return np.searchsorted(offsets[1:], index, side="right").astype(np.int64) - (index < offsets[0])


def _one_per_position(candidates: np.ndarray, positions: np.ndarray, last_wins: bool) -> np.ndarray:
    """One row per position among `candidates` (rows in order): the last or the first of each."""
    import numpy as np

    if not candidates.size:
        return candidates
    ordered = candidates[::-1] if last_wins else candidates
    _, first = np.unique(positions[ordered], return_index=True)
    return np.sort(ordered[first])


def _element_sizes(parts: pl.DataFrame) -> np.ndarray:
    """Each row's element size: its dtype's, else in_bytes over the sum of its positive splits when that
    divides exactly, else 0 (unknown)."""
    import numpy as np

    sizes = np.array([dtype_bytes(d) or 0 for d in parts["dtype"].to_list()], dtype=np.int64)
    for i in np.flatnonzero(sizes == 0).tolist():
        in_bytes = parts["in_bytes"][i]
        splits = parts["in_splits"][i]
        if splits is None or not len(splits):
            splits = parts["out_splits"][i]
        if not in_bytes or splits is None:
            continue
        values = splits.fill_null(0).to_numpy().astype(np.int64, copy=False)
        positive = values[values > 0]
        # Exact without overflow: the high and low 32 bits summed apart (each sum fits int64).
        total = (int((positive >> 32).sum()) << 32) + int((positive & 0xFFFFFFFF).sum())
        if total and in_bytes % total == 0:
            sizes[i] = in_bytes // total
    return sizes


def _count(issues: dict[str, int], issue: str) -> None:
    issues[issue] = issues.get(issue, 0) + 1
