-- name: group_size_trend
-- answers: Do the GPUs per collective grow as fast as the GPUs per job? Per period: the jobs, their
--          median, p90 and largest size, and the group size of their collective calls weighted by
--          calls and by wire bytes, its p90 and maximum, and the share of calls in groups of at most
--          128 GPUs. The calls are those of group_size_calls: send/recv left out.
-- params: $start (timestamp: the first day of period 0), $period_months (integer 1..: months per period)
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
-- group_size_calls: the calls every group-size query counts (send/recv left out)
calls as (
    select d.period, c.group_size, c.calls, c.wire_bytes
    from group_size_calls c
    join dated d using (job_id)
),
-- the calls of each group size, those up to it, and all of the period's: quantile_disc over the calls
group_calls as (
    select
        period,
        group_size,
        sum(sum(calls)) over (partition by period order by group_size) as up_to,
        sum(sum(calls)) over (partition by period) as period_calls
    from calls
    group by period, group_size
),
p90 as (
    select period, min(group_size) filter (where up_to >= ceil(0.9::double * period_calls)) as p90_group_size
    from group_calls
    group by period
),
call_stats as (
    select
        k.period,
        cast(sum(k.calls) as bigint) as calls,
        sum(k.calls::hugeint * k.group_size) / sum(k.calls) as mean_group_size,
        sum(k.group_size * k.wire_bytes) / nullif(sum(k.wire_bytes), 0) as byte_weighted_group_size,
        any_value(p.p90_group_size) as p90_group_size,
        max(k.group_size) as max_group_size,
        coalesce(sum(k.calls) filter (where k.group_size <= 128), 0) / sum(k.calls) as share_calls_le_128
    from calls k
    join p90 p using (period)
    group by k.period
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
