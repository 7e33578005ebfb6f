-- name: collective_groups
-- answers: The collectives of each job (send and recv aside) counted per process group, comm_type,
--          element type, group size and exact message size: what the class rule reads to place a
--          group's calls (its members come from process_groups) and to tell embedding ids from
--          activations, which collective_sizes (no process group, no dtype) cannot.
-- params: none
-- returns: job_id, pg_name, comm_type, dtype, group_size, in_bytes, in_elems, calls
-- rule: one row per distinct (job_id, pg_name, comm_type, dtype, group_size, in_bytes, in_elems),
--          nulls grouped together; SEND and RECV rows are in collective_peers instead.
select
    job_id,
    pg_name,
    comm_type,
    dtype,
    group_size,
    in_bytes,
    in_elems,
    count(*) as calls
from collectives
where comm_type is distinct from 'SEND' and comm_type is distinct from 'RECV'
group by all;
