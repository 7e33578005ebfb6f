-- name: group_size_calls
-- answers: Which calls count when GPUs per collective are counted? The rows of collective_sizes (calls
--          per job, op, type, group size and message size) that every group-size question reads.
-- params: none
-- returns: job_id, op_name, comm_type, group_size, in_bytes, in_elems, is_uneven, timed, calls, wire_bytes
-- rule: the one rule of every group-size query (group_size_by_job_size, group_size_trend,
--          group_size_vs_job_size): calls with a known group size, send and recv left out. A send or
--          recv joins two GPUs whatever the size of the group it runs in, so counting its group would
--          count GPUs that take no part in it (a pipeline's send/recv run in the world group).
select *
from collective_sizes
where group_size is not null and comm_type not in ('SEND', 'RECV');
