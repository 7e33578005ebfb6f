-- name: traffic_matrix_gpu
-- answers: How many bytes does each GPU (rank) send to each other GPU, NVLink and network apart?
--          (row = sender; scope 'intra_host' for flows inside a host, 'inter_host' across hosts)
-- params: none
-- returns: src_rank, dst_rank, scope, bytes, flows
select
    src_rank,
    dst_rank,
    case when src_host = dst_host then 'intra_host' else 'inter_host' end as scope,
    cast(sum(bytes) as bigint) as bytes,
    count(*) as flows
from flows
where bytes > 0
group by all
order by src_rank, dst_rank;
