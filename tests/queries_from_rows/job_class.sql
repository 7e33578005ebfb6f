-- name: job_class
-- answers: Which parallelism does each job use, judged from its collectives alone? One class per job
--          by the first rule below that holds, the evidence as columns, and the class of the job's
--          label beside it: a label 'class:model' overrides the inferred class (overridden says where
--          the two differ); a label without ':' names the model only.
-- params: none
-- returns: job_id, label, model, class, class_source ('label' or 'inferred'), inferred_class,
--          label_class, overridden, job_gpus (world_size, or the largest group when that is larger or
--          world_size is unknown), ranks_seen, data_calls, data_calls_per_rank, allreduce_share,
--          gather_scatter_share, alltoall_share, p2p_share, subgroup_share, allreduce_calls_per_rank,
--          allreduce_modal_share, uneven_alltoall, max_group_size, group_sizes, wire_bytes,
--          allreduce_wire_share, gather_scatter_wire_share, alltoall_wire_share, p2p_wire_share
-- rule: shares are of the job's data calls: collectives of more than 64 bytes or of unknown size, over
--          all ranks seen (control calls of a few scalars, such as a loss, token counts or DDP's bucket
--          layout, say nothing of the parallelism). Shares and per-rank counts do not depend on how
--          many of the job's ranks were ingested.
--          1. llm-3d       send/recv are >= 5% of data calls: pipeline stages pass activations
--          2. fsdp         all-gather + reduce-scatter are >= 50%: FSDP/ZeRO-3 gathers each unit's
--                          parameters and reduce-scatters its gradients (HSDP adds a replica all-reduce)
--          3. ranking-ddp  all-to-all(v) are >= 10%: embedding tables sharded model-parallel (DLRM) with
--                          a data-parallel all-reduce of the dense part; MoE expert parallelism has the
--                          same collectives and lands here too
--          4. llm-3d       >= 50% run in groups smaller than the job (tensor, pipeline and data-parallel
--                          groups partition it), or >= 90% of the data all-reduces have one size and there
--                          are >= 8 per rank (tensor-parallel all-reduces carry activations of one shape,
--                          b*s*h; DDP's gradient buckets differ in size: a small first one, a remainder)
--          5. ddp          all-reduce are >= 50%: data parallel, gradient buckets
--          6. other        none of these (also a job with no data calls)
with calls as (
    select
        c.job_id,
        c.rank,
        c.comm_type,
        c.in_bytes,
        c.group_size,
        c.is_uneven,
        c.wire_bytes,
        (c.in_bytes is null or c.in_bytes > 64) as is_data
    from collective_wire_bytes(null) c
),
sizes as (
    select job_id, max(group_size) as max_group_size, list(distinct group_size order by group_size) as group_sizes
    from calls
    where group_size is not null
    group by job_id
),
job_size as (
    select j.job_id, greatest(j.world_size, s.max_group_size) as job_gpus, s.max_group_size, s.group_sizes
    from jobs j
    left join sizes s using (job_id)
),
allreduce_sizes as (
    select job_id, in_bytes, count(*) as n
    from calls
    where is_data and comm_type = 'ALL_REDUCE' and in_bytes is not null
    group by all
),
allreduce_mode as (
    select job_id, max(n) / sum(n) as allreduce_modal_share
    from allreduce_sizes
    group by job_id
),
evidence as (
    select
        k.job_id,
        count(distinct k.rank) as ranks_seen,
        count(*) filter (where k.is_data) as data_calls,
        count(*) filter (where k.is_data and k.comm_type = 'ALL_REDUCE') as allreduce_calls,
        count(*) filter (where k.is_data and k.comm_type in ('ALL_GATHER', 'REDUCE_SCATTER')) as gather_scatter_calls,
        count(*) filter (where k.is_data and k.comm_type = 'ALL_TO_ALL') as alltoall_calls,
        count(*) filter (where k.is_data and k.comm_type in ('SEND', 'RECV')) as p2p_calls,
        count(*) filter (where k.is_data and k.group_size < z.job_gpus) as subgroup_calls,
        coalesce(bool_or(k.is_uneven and k.comm_type = 'ALL_TO_ALL'), false) as uneven_alltoall,
        sum(k.wire_bytes) as wire_bytes,
        sum(k.wire_bytes) filter (where k.comm_type = 'ALL_REDUCE') as allreduce_wire,
        sum(k.wire_bytes) filter (where k.comm_type in ('ALL_GATHER', 'REDUCE_SCATTER')) as gather_scatter_wire,
        sum(k.wire_bytes) filter (where k.comm_type = 'ALL_TO_ALL') as alltoall_wire,
        sum(k.wire_bytes) filter (where k.comm_type in ('SEND', 'RECV')) as p2p_wire
    from calls k
    join job_size z using (job_id)
    group by k.job_id
),
shares as (
    select
        z.job_id,
        z.job_gpus,
        z.max_group_size,
        z.group_sizes,
        coalesce(e.ranks_seen, 0) as ranks_seen,
        coalesce(e.data_calls, 0) as data_calls,
        e.data_calls / nullif(e.ranks_seen, 0) as data_calls_per_rank,
        coalesce(e.allreduce_calls / nullif(e.data_calls, 0), 0) as allreduce_share,
        coalesce(e.gather_scatter_calls / nullif(e.data_calls, 0), 0) as gather_scatter_share,
        coalesce(e.alltoall_calls / nullif(e.data_calls, 0), 0) as alltoall_share,
        coalesce(e.p2p_calls / nullif(e.data_calls, 0), 0) as p2p_share,
        coalesce(e.subgroup_calls / nullif(e.data_calls, 0), 0) as subgroup_share,
        coalesce(e.allreduce_calls / nullif(e.ranks_seen, 0), 0) as allreduce_calls_per_rank,
        coalesce(m.allreduce_modal_share, 0) as allreduce_modal_share,
        coalesce(e.uneven_alltoall, false) as uneven_alltoall,
        coalesce(e.wire_bytes, 0) as wire_bytes,
        e.allreduce_wire / nullif(e.wire_bytes, 0) as allreduce_wire_share,
        e.gather_scatter_wire / nullif(e.wire_bytes, 0) as gather_scatter_wire_share,
        e.alltoall_wire / nullif(e.wire_bytes, 0) as alltoall_wire_share,
        e.p2p_wire / nullif(e.wire_bytes, 0) as p2p_wire_share
    from job_size z
    left join evidence e using (job_id)
    left join allreduce_mode m using (job_id)
),
labels as (
    select job_id, case when contains(label, ':') then nullif(split_part(label, ':', 1), '') end as label_class
    from jobs
),
inferred as (
    select
        s.*,
        case
            when s.p2p_share >= 0.05 then 'llm-3d'
            when s.gather_scatter_share >= 0.5 then 'fsdp'
            when s.alltoall_share >= 0.1 then 'ranking-ddp'
            when s.subgroup_share >= 0.5 then 'llm-3d'
            when s.allreduce_modal_share >= 0.9 and s.allreduce_calls_per_rank >= 8 then 'llm-3d'
            when s.allreduce_share >= 0.5 then 'ddp'
            else 'other'
        end as inferred_class
    from shares s
)
select
    j.job_id,
    j.label,
    case when contains(j.label, ':') then nullif(split_part(j.label, ':', 2), '') else j.label end as model,
    coalesce(l.label_class, i.inferred_class) as class,
    case when l.label_class is null then 'inferred' else 'label' end as class_source,
    i.inferred_class,
    l.label_class,
    coalesce(l.label_class <> i.inferred_class, false) as overridden,
    i.job_gpus,
    i.ranks_seen,
    i.data_calls,
    i.data_calls_per_rank,
    i.allreduce_share,
    i.gather_scatter_share,
    i.alltoall_share,
    i.p2p_share,
    i.subgroup_share,
    i.allreduce_calls_per_rank,
    i.allreduce_modal_share,
    i.uneven_alltoall,
    i.max_group_size,
    i.group_sizes,
    i.wire_bytes,
    i.allreduce_wire_share,
    i.gather_scatter_wire_share,
    i.alltoall_wire_share,
    i.p2p_wire_share
from jobs j
join inferred i using (job_id)
join labels l using (job_id)
order by j.job_id;
