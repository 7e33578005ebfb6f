"""Writes ring_2x2/: NCCL Inspector v4.3 files of a 4-rank job whose proxy records are what NCCL's
ring all-reduce sends (run `python tests/replay/observed/make_fixture.py` to rewrite them).

The job: 2 hosts (node-a ranks 0, 1; node-b ranks 2, 3), one NIC each, the world communicator
only, NCCL's ring 0 -> 1 -> 2 -> 3 -> 0 on 2 channels (NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS=2),
protocol Simple. Two AllReduces, of 64 MiB (coll_sn 1) and 16 MiB (coll_sn 2). A ring all-reduce of
S bytes over n ranks sends 2 (n - 1) / n * S to the next rank, split evenly over the channels, so
each channel's proxy moves 3/4 * S / 2 over each of the two network hops (1 -> 2 and 3 -> 0): 48 MiB
and 12 MiB. The sender's proxy records a `send` to its next rank, the receiver's a `recv` from its
previous one; intra-host hops (0 -> 1, 2 -> 3) go over NVLink/P2P, not the proxy, and have no record.

The lines follow Inspector's writer (NVIDIA/nccl#2359, inspector_json.cc's v4.3 line: the
`dump_stats` marker with header and metadata once, then its counted records; `proxy_trace` records
of type `proxy_op`, nested output, final, no steps: NCCL_INSPECTOR_PROXY_STEPS off), as the
fixtures in tests/parsers/nccl_inspector/ do (their README cites the sources line by line).
"""

from __future__ import annotations

import json
from pathlib import Path

COMM = "0x5f0c2a9e13b4d687"
HOSTS = {0: ("node-a", 4101), 1: ("node-a", 4102), 2: ("node-b", 5201), 3: ("node-b", 5202)}
SIZES = {1: 64 << 20, 2: 16 << 20}  # coll_sn -> bytes per rank
CHANNELS = 2
CHUNK = 524_288
RING = [0, 1, 2, 3]
START_US = 1_764_800_000_000_000


def _line(record: object) -> str:
    return json.dumps(record, separators=(",", ":"))


def _network_hops() -> list[tuple[int, int]]:
    """The ring's hops between hosts: (sender, receiver)."""
    hops = zip(RING, RING[1:] + RING[:1], strict=True)
    return [(a, b) for a, b in hops if HOSTS[a][0] != HOSTS[b][0]]


def _proxy_records(rank: int) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    n = len(RING)
    for sn, size in SIZES.items():
        per_channel = 2 * (n - 1) * size // n // CHANNELS
        for sender, receiver in _network_hops():
            if rank not in (sender, receiver):
                continue
            for channel in range(CHANNELS):
                steps = per_channel // CHUNK
                start = START_US + 10_000 * sn + channel
                records.append({
                    "proxy_trace": {
                        "record_type": "proxy_op", "record_sn": len(records) + 1, "parent_type": "coll",
                        "parent_sn": sn, "proxy_op_sn": len(records) + 1, "rank": rank, "channel_id": channel,
                        "peer": receiver if rank == sender else sender,
                        "direction": "send" if rank == sender else "recv", "timing_source": "proxy_cpu",
                        "is_final": True, "n_steps": steps, "chunk_size_bytes": CHUNK, "n_steps_started": steps,
                        "n_steps_completed": steps, "n_steps_dropped": 0, "trans_size_bytes": per_channel,
                        "total_us": 2_000 * sn, "op_bw_gbs": round(per_channel / (2_000 * sn) / 1e3, 6),
                        "event_trace_ts": {"proxy_op_start_ts": start, "proxy_op_in_progress_ts": start + 1,
                                           "proxy_op_stop_ts": start + 2_000 * sn},
                    }
                })  # fmt: skip
    return records


def _file(rank: int) -> str:
    host, pid = HOSTS[rank]
    proxies = _proxy_records(rank)
    marker = {
        "header": {"id": COMM, "comm_name": "default_pg", "rank": rank, "n_ranks": 4, "nnodes": 2},
        "metadata": {"inspector_output_format_version": "v4.3", "git_rev": "5067397c",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": START_US + 100_000,
                     "hostname": host, "pid": pid},
        "dump_stats": {"coll_records": len(SIZES), "coll_dropped_total": 0, "coll_dropped_since_last_dump": 0,
                       "p2p_records": 0, "p2p_dropped_total": 0, "p2p_dropped_since_last_dump": 0,
                       "proxy_records": len(proxies), "proxy_dropped_total": 0, "proxy_dropped_since_last_dump": 0,
                       "proxy_ops_dropped_total": 0, "proxy_ops_dropped_since_last_dump": 0,
                       "proxy_steps_overwritten_total": 0, "proxy_steps_overwritten_since_last_dump": 0,
                       "proxy_output_mode": "nested", "proxy_segment_step_capacity": 32,
                       "proxy_pxn_skipped_process_total": 0, "proxy_steps_enabled": 0},
    }  # fmt: skip
    colls = [
        {"coll_perf": {"coll": "AllReduce", "coll_algo": "RING", "coll_proto": "SIMPLE", "coll_sn": sn,
                       "coll_msg_size_bytes": size, "coll_exec_time_us": 2_000 * sn,
                       "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": round(size / (2_000 * sn) / 1e3, 6),
                       "coll_busbw_gbs": round(1.5 * size / (2_000 * sn) / 1e3, 6)}}
        for sn, size in SIZES.items()
    ]  # fmt: skip
    return "".join(_line(r) + "\n" for r in [marker, *colls, *proxies])


def main() -> None:
    folder = Path(__file__).parent / "ring_2x2"
    folder.mkdir(exist_ok=True)
    for rank, (host, pid) in HOSTS.items():
        (folder / f"{host}-pid{pid}.log").write_text(_file(rank))


if __name__ == "__main__":
    main()
