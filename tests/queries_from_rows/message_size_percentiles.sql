-- name: message_size_percentiles
-- answers: What are the median, p90 and p99 message sizes of each collective type, per class and
--          model, in bytes passed in, in elements (where recorded) and in bytes sent on the wire?
-- params: none
-- returns: class, model, comm_type, jobs, calls (all ranks), p50_bytes, p90_bytes, p99_bytes,
--          p50_elems, p90_elems, p99_elems, p50_wire_bytes, in_bytes, wire_bytes
select
    k.class,
    k.model,
    c.comm_type,
    count(distinct c.job_id) as jobs,
    count(*) as calls,
    quantile_disc(c.in_bytes, 0.5) as p50_bytes,
    quantile_disc(c.in_bytes, 0.9) as p90_bytes,
    quantile_disc(c.in_bytes, 0.99) as p99_bytes,
    quantile_disc(c.in_elems, 0.5) as p50_elems,
    quantile_disc(c.in_elems, 0.9) as p90_elems,
    quantile_disc(c.in_elems, 0.99) as p99_elems,
    quantile_cont(c.wire_bytes, 0.5) as p50_wire_bytes,
    sum(c.in_bytes) as in_bytes,
    sum(c.wire_bytes) as wire_bytes
from collective_wire_bytes(null) c
join job_class k using (job_id)
group by all
order by k.class, k.model nulls last, c.comm_type;
