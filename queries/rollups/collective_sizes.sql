-- name: collective_sizes
-- answers: The collectives of each job counted by op name, type, group size and exact message size
--          (bytes and elements), uneven or not, timed or not, with their bytes on the wire: the rollup
--          that fleet questions about calls, sizes and groups sum over, instead of every collectives row.
-- params: none
-- returns: job_id, op_name, comm_type, group_size, in_bytes, in_elems, is_uneven, timed, calls, wire_bytes
-- rule: one row per distinct (job_id, op_name, comm_type, group_size, in_bytes, in_elems, is_uneven,
--          timed), nulls grouped together; timed is duration_us > 0 (false when unknown); wire_bytes is the
--          sum of collective_wire_bytes.wire_bytes over the rows counted.
select
    job_id,
    op_name,
    comm_type,
    group_size,
    in_bytes,
    in_elems,
    is_uneven,
    coalesce(duration_us > 0, false) as timed,
    count(*) as calls,
    sum(wire_bytes) as wire_bytes
from collective_wire_bytes(null)
group by all;
