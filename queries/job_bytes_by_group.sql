-- name: job_bytes_by_group
-- answers: In one job, which process groups carry the traffic? Per group: its description and size,
--          the collective types run in it, calls, and bytes passed in and sent on the wire (calls whose
--          trace does not name the group are one row with a null pg_name).
-- params: $job_id (string: the job)
-- returns: pg_name, pg_desc, group_size, comm_types, ranks (issuing ranks seen), calls, in_bytes,
--          wire_bytes, wire_share (of the job's wire bytes)
select
    c.pg_name,
    g.pg_desc,
    coalesce(g.group_size, max(c.group_size)) as group_size,
    list(distinct c.comm_type order by c.comm_type) as comm_types,
    count(distinct c.rank) as ranks,
    count(*) as calls,
    sum(c.in_bytes) as in_bytes,
    sum(c.wire_bytes) as wire_bytes,
    coalesce(sum(c.wire_bytes) / nullif(sum(sum(c.wire_bytes)) over (), 0), 0) as wire_share
from collective_wire_bytes($job_id) c
left join process_groups g on g.job_id = c.job_id and g.pg_name = c.pg_name
where c.job_id = $job_id
group by c.pg_name, g.pg_desc, g.group_size
order by wire_bytes desc nulls last, c.pg_name;
