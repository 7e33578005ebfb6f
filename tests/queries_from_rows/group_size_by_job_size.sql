-- name: group_size_by_job_size
-- answers: How many GPUs take part in each collective, against the size of its job? Calls (all
--          ranks) and wire bytes per (job size, group size), send/recv left out (they join two GPUs
--          whatever their group).
-- params: none
-- returns: job_gpus, group_size, jobs, calls, share (of all calls with a known group size),
--          wire_bytes, wire_share
select
    k.job_gpus,
    c.group_size,
    count(distinct c.job_id) as jobs,
    count(*) as calls,
    count(*) / sum(count(*)) over () as share,
    sum(c.wire_bytes) as wire_bytes,
    coalesce(sum(c.wire_bytes) / nullif(sum(sum(c.wire_bytes)) over (), 0), 0) as wire_share
from collective_wire_bytes(null) c
join job_class k using (job_id)
where c.group_size is not null and c.comm_type not in ('SEND', 'RECV')
group by all
order by k.job_gpus, c.group_size;
