-- name: collective_group_sizes
-- answers: How many GPUs take part in each job's collectives, by op name? (calls over all ranks,
--          smallest and largest group, against the job's size)
-- params: none
-- returns: job_id, label, world_size, op_name, comm_type, calls, min_group_size, max_group_size,
--          in_bytes, wire_bytes (collective_wire_bytes)
select
    o.job_id,
    j.label,
    j.world_size,
    o.op_name,
    o.comm_type,
    o.calls,
    o.min_group_size,
    o.max_group_size,
    o.in_bytes,
    o.wire_bytes
-- collective_ops: per job, op name and comm_type (a rollup)
from collective_ops o
join jobs j using (job_id)
order by o.job_id, o.op_name;
