-- name: message_size_spread
-- answers: How much do the message sizes of each job's collectives (by op name) vary across its
--          ranks and calls? (log-scale mean and spread; uneven all-to-allv shows a spread > 0)
-- params: none
-- returns: job_id, label, op_name, comm_type, ranks, calls, mean_ln_bytes, sd_ln_bytes,
--          min_bytes, max_bytes, wire_bytes (all ranks: collective_wire_bytes)
select
    o.job_id,
    j.label,
    o.op_name,
    o.comm_type,
    r.sized_ranks as ranks,
    o.sized_calls as calls,
    o.mean_ln_bytes,
    coalesce(o.sd_ln_bytes, 0) as sd_ln_bytes,
    o.min_bytes,
    o.max_bytes,
    o.sized_wire_bytes as wire_bytes
-- collective_ops: per job, op name and comm_type (a rollup)
from collective_ops o
join jobs j using (job_id)
-- collective_ranks: the ranks issuing each op with a size
join collective_ranks r
    on r.job_id = o.job_id and not r.whole_job and r.op_name is not distinct from o.op_name
    and r.comm_type is not distinct from o.comm_type
where o.sized_calls > 0
order by o.job_id, o.op_name;
