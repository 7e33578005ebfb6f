-- name: collective_ranks
-- answers: How many ranks of each job issue collectives: per job (whole_job), and per job, op name and
--          comm_type (with those whose calls carry a size): the distinct counts no sum over
--          collective_sizes can give.
-- params: none
-- returns: job_id, whole_job, op_name, comm_type, ranks, sized_ranks
-- rule: ranks counts distinct non-null ranks; sized_ranks those with a call of in_bytes > 0. A whole_job
--          row has op_name and comm_type null.
select
    job_id,
    grouping(op_name, comm_type) > 0 as whole_job,
    op_name,
    comm_type,
    count(distinct rank) as ranks,
    count(distinct rank) filter (where in_bytes > 0) as sized_ranks
from collectives
group by grouping sets ((job_id), (job_id, op_name, comm_type));
