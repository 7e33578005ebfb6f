-- name: job_size_distribution
-- answers: How many jobs of each size (GPUs = jobs.world_size) started in each period of the fleet?
-- params: $start (timestamp: the fleet's first day), $period_months (integer 1..: months per period)
-- returns: period (0 = the period starting at $start), world_size, jobs
select
    cast(floor(datediff('month', cast($start as timestamptz), started_at) / $period_months) as integer)
        as period,
    world_size,
    count(*) as jobs
from jobs
where started_at is not null and world_size is not null
group by all
order by period, world_size;
