-- name: traffic_matrix_host
-- answers: How many bytes does each host send to each host? The diagonal (scope 'intra_host') is
--          NVLink traffic, the rest ('inter_host') crosses the network (the paper's Figure 3).
-- params: none
-- returns: src_host, dst_host, scope, bytes, flows, share (of the largest inter-host cell)
select
    src_host,
    dst_host,
    case when src_host = dst_host then 'intra_host' else 'inter_host' end as scope,
    cast(sum(bytes) as bigint) as bytes,
    count(*) as flows,
    sum(bytes) / max(sum(bytes) filter (where src_host <> dst_host)) over () as share
from flows
where bytes > 0
group by all
order by src_host, dst_host;
