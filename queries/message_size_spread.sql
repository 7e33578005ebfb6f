-- name: message_size_spread
-- answers: How much do the message sizes of each job's collectives (by op name) vary across its
--          ranks and calls? (log-scale mean and spread; uneven all-to-allv shows a spread > 0)
-- params: none
-- returns: job_id, label, op_name, comm_type, ranks, calls, mean_ln_bytes, sd_ln_bytes,
--          min_bytes, max_bytes, wire_bytes (all ranks: collective_wire_bytes)
with sized as (
    select c.job_id, c.op_name, c.comm_type, c.in_bytes, c.calls, c.wire_bytes, ln(c.in_bytes) as ln_bytes
    from collective_sizes c
    where c.in_bytes > 0
),
per_op as (
    select
        job_id,
        op_name,
        comm_type,
        cast(sum(calls) as bigint) as calls,
        sum(calls * ln_bytes) / sum(calls) as mean_ln_bytes,
        min(in_bytes) as min_bytes,
        max(in_bytes) as max_bytes,
        sum(wire_bytes) as wire_bytes
    from sized
    group by all
),
spread as (
    select
        p.job_id,
        p.op_name,
        p.comm_type,
        sqrt(sum(s.calls * (s.ln_bytes - p.mean_ln_bytes) ^ 2) / any_value(p.calls)) as sd_ln_bytes
    from per_op p
    join sized s
        on s.job_id = p.job_id and s.op_name is not distinct from p.op_name and s.comm_type is not distinct from p.comm_type
    group by p.job_id, p.op_name, p.comm_type
)
select
    p.job_id,
    j.label,
    p.op_name,
    p.comm_type,
    r.sized_ranks as ranks,
    p.calls,
    p.mean_ln_bytes,
    coalesce(s.sd_ln_bytes, 0) as sd_ln_bytes,
    p.min_bytes,
    p.max_bytes,
    p.wire_bytes
from per_op p
join jobs j using (job_id)
join spread s
    on s.job_id = p.job_id and s.op_name is not distinct from p.op_name and s.comm_type is not distinct from p.comm_type
-- collective_ranks: the ranks issuing each op with a size
join collective_ranks r
    on r.job_id = p.job_id and not r.whole_job and r.op_name is not distinct from p.op_name
    and r.comm_type is not distinct from p.comm_type
order by p.job_id, p.op_name;
