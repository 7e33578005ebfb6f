-- name: group_size_trend
-- answers: Do the GPUs per collective grow as fast as the GPUs per job? Per period: the jobs, their
--          median, p90 and largest size, and the group size of their collective calls (send/recv
--          left out) weighted by calls and by wire bytes, its p90 and maximum, and the share of calls
--          in groups of at most 128 GPUs.
-- params: $start (timestamp: the first day of period 0), $period_months (integer: months per period)
-- returns: period, period_start, jobs, median_job_gpus, p90_job_gpus, max_job_gpus, calls,
--          mean_group_size (call-weighted), byte_weighted_group_size (weighted by wire bytes),
--          p90_group_size (of calls), max_group_size, share_calls_le_128
with dated as (
    select
        k.job_id,
        k.job_gpus,
        cast(floor(datediff('month', cast($start as timestamptz), j.started_at) / $period_months) as integer)
            as period
    from job_class k
    join jobs j using (job_id)
    where j.started_at is not null and j.started_at >= cast($start as timestamptz)
),
job_stats as (
    select
        period,
        count(*) as jobs,
        quantile_disc(job_gpus, 0.5) as median_job_gpus,
        quantile_disc(job_gpus, 0.9) as p90_job_gpus,
        max(job_gpus) as max_job_gpus
    from dated
    group by period
),
call_stats as (
    select
        d.period,
        count(*) as calls,
        avg(c.group_size) as mean_group_size,
        sum(c.group_size * c.wire_bytes) / nullif(sum(c.wire_bytes), 0) as byte_weighted_group_size,
        quantile_disc(c.group_size, 0.9) as p90_group_size,
        max(c.group_size) as max_group_size,
        avg(case when c.group_size <= 128 then 1.0 else 0.0 end) as share_calls_le_128
    from collective_wire_bytes(null) c
    join dated d using (job_id)
    where c.group_size is not null and c.comm_type not in ('SEND', 'RECV')
    group by d.period
)
select
    s.period,
    cast(cast($start as timestamptz) + to_months(s.period * $period_months) as date) as period_start,
    s.jobs,
    s.median_job_gpus,
    s.p90_job_gpus,
    s.max_job_gpus,
    coalesce(c.calls, 0) as calls,
    c.mean_group_size,
    c.byte_weighted_group_size,
    c.p90_group_size,
    c.max_group_size,
    c.share_calls_le_128
from job_stats s
left join call_stats c using (period)
order by s.period;
