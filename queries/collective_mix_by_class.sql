-- name: collective_mix_by_class
-- answers: What share of the communication calls and of the bytes on the wire is each collective type,
--          per workload class (job_class.class: the label's class where a label 'class:model' gives
--          one, else the class inferred from the collectives)?
-- params: none
-- returns: class, comm_type, jobs, calls (all ranks), share (of the class's calls), in_bytes,
--          wire_bytes (collective_wire_bytes), wire_share (of the class's wire bytes)
select
    k.class,
    c.comm_type,
    count(distinct c.job_id) as jobs,
    cast(sum(c.calls) as bigint) as calls,
    sum(c.calls) / sum(sum(c.calls)) over (partition by k.class) as share,
    sum(c.calls::hugeint * c.in_bytes) as in_bytes,
    sum(c.wire_bytes) as wire_bytes,
    coalesce(sum(c.wire_bytes) / nullif(sum(sum(c.wire_bytes)) over (partition by k.class), 0), 0) as wire_share
from collective_sizes c
join job_class k using (job_id)
group by 1, 2
order by class, comm_type;
