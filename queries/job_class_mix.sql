-- name: job_class_mix
-- answers: How many jobs of each workload class and model started in each period?
--          (labels are 'class:model', as `tracekit generate` writes them; a label without ':' is
--          its own class with an empty model)
-- params: $start (timestamp: the fleet's first day), $period_months (integer 1..: months per period)
-- returns: period, class, model, jobs
select
    cast(floor(datediff('month', cast($start as timestamptz), started_at) / $period_months) as integer)
        as period,
    split_part(label, ':', 1) as class,
    split_part(label, ':', 2) as model,
    count(*) as jobs
from jobs
where started_at is not null and label is not null
group by all
order by period, class, model;
