-- name: group_size_by_job_size
-- answers: How many GPUs take part in each collective, against the size of its job? Calls (all
--          ranks) and wire bytes per (job size, group size), over the calls of group_size_calls:
--          send/recv left out (they join two GPUs whatever their group).
-- params: none
-- returns: job_gpus, group_size, jobs, calls, share (of all calls with a known group size),
--          wire_bytes, wire_share
select
    k.job_gpus,
    c.group_size,
    count(distinct c.job_id) as jobs,
    cast(sum(c.calls) as bigint) as calls,
    sum(c.calls) / sum(sum(c.calls)) over () as share,
    sum(c.wire_bytes) as wire_bytes,
    coalesce(sum(c.wire_bytes) / nullif(sum(sum(c.wire_bytes)) over (), 0), 0) as wire_share
-- group_size_calls: the calls every group-size query counts (send/recv left out)
from group_size_calls c
join job_class k using (job_id)
group by all
order by k.job_gpus, c.group_size;
