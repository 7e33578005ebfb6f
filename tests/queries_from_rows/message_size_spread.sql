-- name: message_size_spread
-- answers: How much do the message sizes of each job's collectives (by op name) vary across its
--          ranks and calls? (log-scale mean and spread; uneven all-to-allv shows a spread > 0)
-- params: none
-- returns: job_id, label, op_name, comm_type, ranks, calls, mean_ln_bytes, sd_ln_bytes,
--          min_bytes, max_bytes, wire_bytes (all ranks: collective_wire_bytes)
select
    c.job_id,
    j.label,
    c.op_name,
    c.comm_type,
    count(distinct c.rank) as ranks,
    count(*) as calls,
    avg(ln(c.in_bytes)) as mean_ln_bytes,
    coalesce(stddev_pop(ln(c.in_bytes)), 0) as sd_ln_bytes,
    min(c.in_bytes) as min_bytes,
    max(c.in_bytes) as max_bytes,
    sum(c.wire_bytes) as wire_bytes
from collective_wire_bytes(null) c
join jobs j using (job_id)
where c.in_bytes > 0
group by all
order by c.job_id, c.op_name;
