-- name: collective_peers
-- answers: The send and recv calls of each job per rank and peer, element type and exact message size:
--          who passes data to whom, what the class rule reads to tell a pipeline (neighbouring
--          stages, both ways) from a ring all-reduce or an all-to-all written as point-to-point calls.
-- params: none
-- returns: job_id, rank, peer, comm_type, dtype, in_bytes, in_elems, calls
-- rule: one row per distinct (job_id, rank, peer, comm_type, dtype, in_bytes, in_elems) of the SEND and
--          RECV rows, nulls grouped together (peer is null where the trace does not record it).
select
    job_id,
    rank,
    peer,
    comm_type,
    dtype,
    in_bytes,
    in_elems,
    count(*) as calls
from collectives
where comm_type in ('SEND', 'RECV')
group by all;
