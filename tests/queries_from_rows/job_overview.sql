-- name: job_overview
-- answers: What is each job? Its label and class (with where the class came from), size, ranks seen,
--          start, collective calls, bytes passed in and sent on the wire, largest group, and the
--          collective types it uses.
-- params: none
-- returns: job_id, label, class, class_source, inferred_class, overridden, job_gpus, world_size,
--          ranks_seen, started_at, calls, in_bytes, wire_bytes, max_group_size, comm_types, timed_share
with per_job as (
    select
        job_id,
        count(*) as calls,
        sum(in_bytes) as in_bytes,
        sum(wire_bytes) as wire_bytes,
        list(distinct comm_type order by comm_type) as comm_types,
        avg(case when duration_us > 0 then 1.0 else 0.0 end) as timed_share
    from collective_wire_bytes(null)
    group by job_id
)
select
    k.job_id,
    k.label,
    k.class,
    k.class_source,
    k.inferred_class,
    k.overridden,
    k.job_gpus,
    j.world_size,
    k.ranks_seen,
    j.started_at,
    coalesce(p.calls, 0) as calls,
    coalesce(p.in_bytes, 0) as in_bytes,
    coalesce(p.wire_bytes, 0) as wire_bytes,
    k.max_group_size,
    coalesce(p.comm_types, []) as comm_types,
    coalesce(p.timed_share, 0) as timed_share
from job_class k
join jobs j using (job_id)
left join per_job p using (job_id)
order by k.job_id;
