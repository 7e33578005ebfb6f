-- name: collective_mix_by_class
-- answers: What share of the communication calls (all ranks) is each collective type, per workload
--          class (the part of jobs.label before ':')?
-- params: none
-- returns: class, comm_type, calls, share (of the class's calls)
select
    split_part(j.label, ':', 1) as class,
    c.comm_type,
    count(*) as calls,
    count(*) / sum(count(*)) over (partition by split_part(j.label, ':', 1)) as share
from collectives c
join jobs j using (job_id)
group by 1, 2
order by class, comm_type;
