-- name: collective_ops
-- answers: The collectives of each job per op name and comm_type: calls, group sizes and bytes of all of
--          them, and how the sizes of those that carry one (in_bytes > 0) spread; what the per-job, per-op
--          fleet listings (collective_group_sizes, message_size_spread) read instead of collective_sizes.
-- params: none
-- returns: job_id, op_name, comm_type, calls, min_group_size, max_group_size, in_bytes, wire_bytes,
--          sized_calls, mean_ln_bytes, sd_ln_bytes, min_bytes, max_bytes, sized_wire_bytes
-- rule: sums over collective_sizes. The sized_ columns, mean_ln_bytes, sd_ln_bytes, min_bytes and
--          max_bytes count only calls with in_bytes > 0 (null where there are none); mean_ln_bytes and
--          sd_ln_bytes are the calls-weighted mean and population standard deviation of ln(in_bytes).
with per_op as (
    select
        job_id,
        op_name,
        comm_type,
        cast(sum(calls) as bigint) as calls,
        min(group_size) as min_group_size,
        max(group_size) as max_group_size,
        sum(calls::hugeint * in_bytes) as in_bytes,
        sum(wire_bytes) as wire_bytes,
        cast(sum(calls) filter (where in_bytes > 0) as bigint) as sized_calls,
        sum(calls * ln(in_bytes)) filter (where in_bytes > 0) / sum(calls) filter (where in_bytes > 0)
            as mean_ln_bytes,
        min(in_bytes) filter (where in_bytes > 0) as min_bytes,
        max(in_bytes) filter (where in_bytes > 0) as max_bytes,
        sum(wire_bytes) filter (where in_bytes > 0) as sized_wire_bytes
    from collective_sizes
    group by job_id, op_name, comm_type
),
spread as (
    select
        p.job_id,
        p.op_name,
        p.comm_type,
        sqrt(sum(s.calls * (ln(s.in_bytes) - p.mean_ln_bytes) ^ 2) / any_value(p.sized_calls)) as sd_ln_bytes
    from per_op p
    join collective_sizes s
        on s.job_id = p.job_id and s.op_name is not distinct from p.op_name
        and s.comm_type is not distinct from p.comm_type
    where s.in_bytes > 0
    group by p.job_id, p.op_name, p.comm_type
)
select
    p.job_id,
    p.op_name,
    p.comm_type,
    p.calls,
    p.min_group_size,
    p.max_group_size,
    p.in_bytes,
    p.wire_bytes,
    p.sized_calls,
    p.mean_ln_bytes,
    s.sd_ln_bytes,
    p.min_bytes,
    p.max_bytes,
    p.sized_wire_bytes
from per_op p
left join spread s
    on s.job_id = p.job_id and s.op_name is not distinct from p.op_name and s.comm_type is not distinct from p.comm_type;
