-- name: locality_by_collective
-- answers: For each collective type and algorithm, how many bytes stay inside a host (NVLink) and
--          how many cross the network, and what share stays inside? (nvls flows, GPU to the host's
--          NVSwitch, stay inside; collnet flows, NIC to a SHARP switch, cross the network)
-- params: none
-- returns: comm_type, algorithm, flows, bytes, intra_host_bytes, inter_host_bytes, intra_host_share
select
    comm_type,
    algorithm,
    count(*) as flows,
    cast(sum(bytes) as bigint) as bytes,
    cast(coalesce(sum(bytes) filter (where link not in ('network', 'collnet')), 0) as bigint) as intra_host_bytes,
    cast(coalesce(sum(bytes) filter (where link in ('network', 'collnet')), 0) as bigint) as inter_host_bytes,
    coalesce(sum(bytes) filter (where link not in ('network', 'collnet')), 0) / nullif(sum(bytes), 0) as intra_host_share
from flows
where bytes > 0
group by all
order by comm_type, algorithm;
