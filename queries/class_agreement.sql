-- name: class_agreement
-- answers: How often does the class inferred from a job's collectives (job_class) agree with the class
--          of its label? One row per (label class, inferred class), for labelled jobs.
-- params: none
-- returns: label_class, inferred_class, jobs, agrees, share (of the label class's jobs)
select
    label_class,
    inferred_class,
    count(*) as jobs,
    any_value(label_class = inferred_class) as agrees,
    count(*) / sum(count(*)) over (partition by label_class) as share
from job_class
where label_class is not null
group by label_class, inferred_class
order by label_class, jobs desc;
