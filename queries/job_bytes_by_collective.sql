-- name: job_bytes_by_collective
-- answers: In one job, how many calls and bytes does each collective type carry, passed in and sent on
--          the wire, in total and per rank?
-- params: $job_id (string: the job)
-- returns: comm_type, ranks, calls (all ranks), calls_per_rank, in_bytes, wire_bytes,
--          wire_bytes_per_rank, p50_bytes, max_bytes
select
    comm_type,
    count(distinct rank) as ranks,
    count(*) as calls,
    count(*) / count(distinct rank) as calls_per_rank,
    sum(in_bytes) as in_bytes,
    sum(wire_bytes) as wire_bytes,
    sum(wire_bytes) / count(distinct rank) as wire_bytes_per_rank,
    quantile_disc(in_bytes, 0.5) as p50_bytes,
    max(in_bytes) as max_bytes
from collective_wire_bytes($job_id)
where job_id = $job_id
group by comm_type
order by wire_bytes desc nulls last, comm_type;
