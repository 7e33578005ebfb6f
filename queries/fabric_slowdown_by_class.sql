-- name: fabric_slowdown_by_class
-- answers: How much longer do each class's collectives take on each fabric and routing than on an
--          ideal non-blocking fabric of the same NICs? Per class, fabric and routing: the jobs that
--          send over the network, and the distribution over them of the job's slowdown (its
--          collectives' time over the ideal fabric's, the median of the ECMP seeds): p10, p25,
--          median, p75, p90, max, and the share of jobs slowed by more than 10%. Reads the tables
--          `tracekit replay --fleet` writes (empty until it has run).
-- params: none
-- returns: class, fabric, routing, jobs, p10, p25, median, p75, p90, max, slowed_share,
--          network_bytes
select
    j.class,
    f.fabric,
    f.routing,
    count(*) as jobs,
    quantile_cont(f.slowdown, 0.10) as p10,
    quantile_cont(f.slowdown, 0.25) as p25,
    median(f.slowdown) as median,
    quantile_cont(f.slowdown, 0.75) as p75,
    quantile_cont(f.slowdown, 0.90) as p90,
    max(f.slowdown) as max,
    avg(case when f.slowdown > 1.1 then 1.0 else 0.0 end) as slowed_share,
    sum(f.network_bytes) as network_bytes
from replay_fabrics f
join replay_jobs j using (job_id)
where f.comm_type = 'all' and f.network_bytes > 0 and f.slowdown is not null
group by all
order by j.class, f.fabric, f.routing;
