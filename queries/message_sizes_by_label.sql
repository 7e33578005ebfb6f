-- name: message_sizes_by_label
-- answers: What message sizes does each collective (by op name) carry in each job, seen from one
--          rank, per label? One row per job and op name: the first call's bytes (one independent
--          draw per job, for distribution tests) and the rank's total bytes and calls.
-- params: $rank (integer 0..1048575: the global rank to look from, e.g. 0)
-- returns: job_id, label, class, model, world_size, op_name, comm_type, first_bytes, total_bytes, calls,
--          total_wire_bytes (the rank's bytes on the wire: collective_wire_bytes)
select
    j.job_id,
    j.label,
    split_part(j.label, ':', 1) as class,
    split_part(j.label, ':', 2) as model,
    j.world_size,
    c.op_name,
    c.comm_type,
    arg_min(c.in_bytes, c.op_id) as first_bytes,
    sum(c.in_bytes) as total_bytes,
    count(*) as calls,
    sum(c.wire_bytes) as total_wire_bytes
from collective_wire_bytes(null) c
join jobs j using (job_id)
where c.rank = $rank
group by all
order by j.job_id, c.op_name;
