-- name: network_peers_per_gpu
-- answers: How many distinct network peers (GPUs on other hosts) does each GPU send to, and how
--          many bytes? (the NIC connections NCCL opens per GPU: flow entropy for ECMP)
-- params: none
-- returns: src_rank, src_host, peer_gpus, peer_hosts, inter_host_bytes
select
    src_rank,
    src_host,
    count(distinct dst_rank) as peer_gpus,
    count(distinct dst_host) as peer_hosts,
    cast(sum(bytes) as bigint) as inter_host_bytes
from flows
where bytes > 0 and src_host <> dst_host
group by all
order by src_rank;
