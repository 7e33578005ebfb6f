-- name: collective_bandwidth
-- answers: What algorithm and bus bandwidth did each timed collective of a job reach, by nccl-tests'
--          definitions? One row per collective call with a duration.
-- params: $job_id (string or NULL: the job; NULL for every job)
-- returns: job_id, rank, trace_id, op_id, op_name, comm_type, group_size, in_bytes, nccl_bytes,
--          duration_us, algbw_gbps, busbw_gbps, wire_bytes
-- rule: nccl-tests (PERFORMANCE.md): algbw = S / t, busbw = algbw * factor, GB/s = 1e9 bytes/s.
--          S is nccl-tests' size, which differs from in_bytes for the gathering collectives:
--          ALL_REDUCE      S = in_bytes,      factor 2(n-1)/n
--          ALL_GATHER      S = in_bytes * n,  factor (n-1)/n   (nccl-tests counts the gathered buffer;
--                                                                in_bytes is this rank's shard)
--          GATHER          S = in_bytes * n,  factor (n-1)/n
--          REDUCE_SCATTER  S = in_bytes,      factor (n-1)/n   (the full input, as nccl-tests)
--          ALL_TO_ALL, SCATTER   S = in_bytes, factor (n-1)/n
--          BROADCAST, REDUCE, SEND, RECV   S = in_bytes, factor 1
--          BARRIER and calls without a duration or a group size of at least 1 are left out. For the ring family
--          busbw * t equals wire_bytes (collective_wire_bytes).
with sized as (
    select
        c.*,
        case
            when c.comm_type in ('ALL_GATHER', 'GATHER') then c.in_bytes::hugeint * c.group_size
            else c.in_bytes
        end as nccl_bytes,
        case
            when c.comm_type = 'ALL_REDUCE' then 2.0 * (c.group_size - 1) / c.group_size
            when c.comm_type in ('ALL_GATHER', 'GATHER', 'REDUCE_SCATTER', 'ALL_TO_ALL', 'SCATTER')
                then 1.0 * (c.group_size - 1) / c.group_size
            else 1.0
        end as bus_factor
    from collective_wire_bytes($job_id) c
    where c.duration_us > 0 and c.in_bytes is not null and c.group_size >= 1 and c.comm_type <> 'BARRIER'
)
select
    job_id,
    rank,
    trace_id,
    op_id,
    op_name,
    comm_type,
    group_size,
    in_bytes,
    nccl_bytes,
    duration_us,
    nccl_bytes / duration_us / 1e3 as algbw_gbps,
    nccl_bytes / duration_us / 1e3 * bus_factor as busbw_gbps,
    wire_bytes
from sized
order by job_id, rank, trace_id, op_id;
