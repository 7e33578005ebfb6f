-- name: job_size_histogram
-- answers: How many GPUs do jobs use? Jobs per size (job_class.job_gpus: world_size, or the largest
--          collective group where that is larger), with the share of jobs, the cumulative share, and
--          whether the size is a multiple of 8 (one 8-GPU server).
-- params: none
-- returns: job_gpus, jobs, share, cum_share, multiple_of_8, gpus (job_gpus x jobs)
select
    job_gpus,
    count(*) as jobs,
    count(*) / sum(count(*)) over () as share,
    sum(count(*)) over (order by job_gpus) / sum(count(*)) over () as cum_share,
    job_gpus % 8 = 0 as multiple_of_8,
    job_gpus * count(*) as gpus
from job_class
where job_gpus is not null
group by job_gpus
order by job_gpus;
