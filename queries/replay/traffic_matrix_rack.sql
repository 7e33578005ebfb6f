-- name: traffic_matrix_rack
-- answers: How many bytes does each rack (leaf switch) send to each rack, split by where they
--          stay: inside a host, between the hosts of one rack, or across racks (via the spines)?
-- params: none
-- returns: src_rack, dst_rack, scope, bytes, flows
select
    src_rack,
    dst_rack,
    case
        when src_host = dst_host then 'intra_host'
        when src_rack = dst_rack then 'intra_rack'
        else 'inter_rack'
    end as scope,
    cast(sum(bytes) as bigint) as bytes,
    count(*) as flows
from flows
where bytes > 0
group by all
order by src_rack, dst_rack, scope;
