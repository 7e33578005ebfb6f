-- name: group_size_vs_job_size
-- answers: Do the GPUs per collective grow as fast as the GPUs per job? Per period: the jobs, their
--          mean log2 job size, the mean over jobs of the log2 group size of their collective calls
--          (call-weighted within a job), and the largest group seen. The calls are those of
--          group_size_calls: send/recv left out (they join two GPUs whatever their group).
-- params: $start (timestamp: the fleet's first day), $period_months (integer 1..: months per period)
-- returns: period, jobs, mean_log2_job_size, mean_log2_group_size, max_group_size, max_job_size
with per_job as (
    select
        c.job_id,
        sum(c.calls * log2(c.group_size)) / sum(c.calls) as log2_group,
        max(c.group_size) as max_group
    -- group_size_calls: the calls every group-size query counts (send/recv left out)
    from group_size_calls c
    group by c.job_id
)
select
    cast(floor(datediff('month', cast($start as timestamptz), j.started_at) / $period_months) as integer)
        as period,
    count(*) as jobs,
    avg(log2(j.world_size)) as mean_log2_job_size,
    avg(p.log2_group) as mean_log2_group_size,
    max(p.max_group) as max_group_size,
    max(j.world_size) as max_job_size
from jobs j
join per_job p using (job_id)
where j.started_at is not null
group by all
order by period;
