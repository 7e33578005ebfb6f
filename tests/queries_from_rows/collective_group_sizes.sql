-- name: collective_group_sizes
-- answers: How many GPUs take part in each job's collectives, by op name? (calls over all ranks,
--          smallest and largest group, against the job's size)
-- params: none
-- returns: job_id, label, world_size, op_name, comm_type, calls, min_group_size, max_group_size,
--          in_bytes, wire_bytes (collective_wire_bytes)
select
    c.job_id,
    j.label,
    j.world_size,
    c.op_name,
    c.comm_type,
    count(*) as calls,
    min(c.group_size) as min_group_size,
    max(c.group_size) as max_group_size,
    sum(c.in_bytes) as in_bytes,
    sum(c.wire_bytes) as wire_bytes
from collective_wire_bytes(null) c
join jobs j using (job_id)
group by all
order by c.job_id, c.op_name;
