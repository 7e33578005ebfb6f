-- name: job_classes
-- answers: The class of each job and its evidence, by the rule that queries/job_class.sql states (its
--          header is the rule's text, and the constants CTE below holds the numbers it names): computed
--          per job by every ingest, so that fleet questions read one row per job instead of
--          aggregating every job's collectives again.
-- params: none
-- returns: the columns of job_class
with constants as (
    select
        64 as data_bytes,
        8 as host_gpus,
        32 as ids_per_peer,
        3 as mesh_peers,
        0.05 as alltoall_min,
        2 as pipeline_per_rank,
        0.25 as tp_min,
        0.5 as replica_per_scatter,
        0.9 as modal_min,
        8 as modal_per_rank,
        0.5 as allreduce_min,
        0.3 as paired_min,
        0.5 as dp_min
),
-- collective_sizes: the job's collectives counted by type, group and exact size (one row per kind).
calls as (
    select
        c.job_id,
        c.comm_type,
        c.in_bytes,
        c.group_size,
        c.is_uneven,
        c.calls,
        c.wire_bytes,
        (c.in_bytes is null or c.in_bytes > k.data_bytes) as is_data
    from collective_sizes c, constants k
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
    select job_id, in_bytes, sum(calls) as n
    from calls
    where is_data and comm_type = 'ALL_REDUCE' and in_bytes is not null
    group by all
),
allreduce_mode as (
    select job_id, max(n) / sum(n) as allreduce_modal_share, arg_max(in_bytes, n) as modal_bytes
    from allreduce_sizes
    group by job_id
),
evidence as (
    select
        k.job_id,
        any_value(r.ranks) as ranks_seen,
        cast(coalesce(sum(k.calls) filter (where k.is_data), 0) as bigint) as data_calls,
        cast(coalesce(sum(k.calls) filter (where k.is_data and k.comm_type = 'ALL_REDUCE'), 0) as bigint)
            as allreduce_calls,
        cast(coalesce(sum(k.calls) filter (where k.is_data and k.comm_type in ('ALL_GATHER', 'REDUCE_SCATTER')), 0)
            as bigint) as gather_scatter_calls,
        cast(coalesce(sum(k.calls) filter (where k.is_data and k.comm_type = 'ALL_TO_ALL'), 0) as bigint)
            as alltoall_calls,
        cast(coalesce(sum(k.calls) filter (where k.is_data and k.comm_type in ('SEND', 'RECV')), 0) as bigint)
            as p2p_calls,
        cast(coalesce(sum(k.calls) filter (where k.is_data and k.group_size < z.job_gpus), 0) as bigint)
            as subgroup_calls,
        coalesce(bool_or(k.is_uneven and k.comm_type = 'ALL_TO_ALL'), false) as uneven_alltoall,
        sum(k.wire_bytes) as wire_bytes,
        sum(k.wire_bytes) filter (where k.comm_type = 'ALL_REDUCE') as allreduce_wire,
        sum(k.wire_bytes) filter (where k.comm_type in ('ALL_GATHER', 'REDUCE_SCATTER')) as gather_scatter_wire,
        sum(k.wire_bytes) filter (where k.comm_type = 'ALL_TO_ALL') as alltoall_wire,
        sum(k.wire_bytes) filter (where k.comm_type in ('SEND', 'RECV')) as p2p_wire
    from calls k
    join job_size z using (job_id)
    -- collective_ranks: the ranks issuing collectives, per job
    left join collective_ranks r on r.job_id = k.job_id and r.whole_job
    group by k.job_id
),
-- Where each process group sits: a host group is 2 to host_gpus consecutive ranks of one host,
-- smaller than the job (process_groups lists the members; the jobs the run touched only).
placement as (
    select
        p.job_id,
        p.pg_name,
        len(p.ranks) between 2 and k.host_gpus
            and len(p.ranks) < z.job_gpus
            and list_max(p.ranks) - list_min(p.ranks) + 1 = len(p.ranks)
            and list_min(p.ranks) // k.host_gpus = list_max(p.ranks) // k.host_gpus as host_group,
        len(p.ranks) > 0 and len(p.ranks) < z.job_gpus as subgroup
    from process_groups p
    join job_size z using (job_id)
    cross join constants k
    where p.job_id in (select job_id from jobs)
),
-- collective_groups: the job's collectives (send/recv aside) per process group, dtype and size.
grouped as (
    select
        g.*,
        (g.in_bytes is null or g.in_bytes > k.data_bytes) as is_data,
        coalesce(p.host_group, false) as host_group,
        coalesce(p.subgroup, false) as subgroup,
        g.dtype in ('Long', 'Int') and g.in_elems > k.ids_per_peer * coalesce(g.group_size, 1) as ids,
        g.dtype is not null and g.dtype not in ('Long', 'Int', 'Short', 'Bool') as floating
    from collective_groups g
    cross join constants k
    left join placement p on p.job_id = g.job_id and p.pg_name = g.pg_name
),
-- AG/RS pairs of one unit: the gathered shard (in elements where known) times the group size is the
-- scattered input, up to the padding of the last shard.
paired as (
    select
        a.job_id,
        a.comm_type,
        a.group_size,
        a.in_bytes,
        a.in_elems,
        a.calls,
        exists (
            select 1
            from grouped b
            where b.job_id = a.job_id and b.is_data and b.group_size = a.group_size
                and b.comm_type = case a.comm_type when 'ALL_GATHER' then 'REDUCE_SCATTER' else 'ALL_GATHER' end
                -- in 128 bits: a shard of up to 2^62 times a group of up to 2^20 passes 64
                and (case a.comm_type when 'ALL_GATHER' then coalesce(a.in_elems, a.in_bytes)::hugeint * a.group_size
                        - coalesce(b.in_elems, b.in_bytes)
                    else coalesce(b.in_elems, b.in_bytes)::hugeint * b.group_size - coalesce(a.in_elems, a.in_bytes) end)
                    between 0 and 8 * a.group_size - 1
        ) as is_paired
    from grouped a
    where a.is_data and a.comm_type in ('ALL_GATHER', 'REDUCE_SCATTER')
),
-- HSDP: an all-reduce across hosts of the size a host group gathers (each replica's shard).
replicas as (
    select
        a.job_id,
        sum(a.calls) as replica_calls
    from grouped a
    where a.is_data and a.comm_type = 'ALL_REDUCE' and not a.host_group
        and a.in_bytes in (
            select s.in_bytes from grouped s
            where s.job_id = a.job_id and s.is_data and s.host_group and s.comm_type = 'ALL_GATHER'
        )
    group by a.job_id
),
group_evidence as (
    select
        g.job_id,
        coalesce(sum(g.calls) filter (
            where g.is_data and g.host_group and g.comm_type in ('ALL_REDUCE', 'ALL_GATHER', 'REDUCE_SCATTER')
        ), 0) as tp_calls,
        coalesce(sum(g.calls) filter (where g.is_data and g.host_group and g.comm_type = 'REDUCE_SCATTER'), 0)
            as host_scatter_calls,
        count(distinct g.pg_name) filter (where g.is_data and g.host_group) as host_groups,
        coalesce(sum(g.calls) filter (where g.is_data and g.comm_type = 'BROADCAST'), 0) as broadcast_calls,
        coalesce(bool_or(g.ids) filter (where g.is_data and g.comm_type = 'ALL_TO_ALL'), false) as alltoall_ids,
        coalesce(bool_or(g.floating) filter (where g.is_data and g.comm_type = 'ALL_TO_ALL'), false)
            as alltoall_floats,
        arg_max(g.dtype, g.calls) filter (where g.is_data and g.comm_type = 'ALL_REDUCE' and g.in_bytes = m.modal_bytes)
            as allreduce_modal_dtype
    from grouped g
    left join allreduce_mode m using (job_id)
    group by g.job_id
),
pair_evidence as (
    select
        job_id,
        coalesce(sum(calls) filter (where is_paired), 0) as paired_calls,
        coalesce(sum(calls) filter (where comm_type = 'ALL_GATHER' and not is_paired), 0) as unpaired_gathers
    from paired
    group by job_id
),
-- collective_peers: who sends to whom. Edges run from sender to receiver, from either side's record.
edges as (
    select
        p.job_id,
        case when p.comm_type = 'SEND' then p.rank else p.peer end as src,
        case when p.comm_type = 'SEND' then p.peer else p.rank end as dst,
        sum(p.calls) as calls,
        bool_or(p.dtype in ('Long', 'Int') and p.in_elems > k.ids_per_peer) as ids,
        bool_or(p.dtype is not null and p.dtype not in ('Long', 'Int', 'Short', 'Bool')) as floating
    from collective_peers p
    cross join constants k
    where (p.in_bytes is null or p.in_bytes > k.data_bytes) and p.peer is not null and p.rank is not null
    group by all
),
degrees as (
    select
        r.job_id,
        r.rank,
        count(distinct e.dst) filter (where e.src = r.rank) as sends_to,
        count(distinct e.src) filter (where e.dst = r.rank) as receives_from,
        count(distinct case when e.src = r.rank then e.dst else e.src end) as peers
    from (select distinct job_id, rank from collective_peers where rank is not null) r
    join edges e on e.job_id = r.job_id and (e.src = r.rank or e.dst = r.rank)
    group by all
),
-- The groups carrying data collectives other than the whole job, by member (for in-group send/recv).
members as (
    select p.job_id, p.pg_name, unnest(p.ranks) as rank
    from process_groups p
    where p.job_id in (select job_id from jobs)
        and (p.job_id, p.pg_name) in (select job_id, pg_name from grouped where is_data and subgroup)
),
shared as (
    select e.job_id, e.src, e.dst
    from edges e
    join members a on a.job_id = e.job_id and a.rank = e.src
    join members b on b.job_id = e.job_id and b.pg_name = a.pg_name and b.rank = e.dst
    group by all
),
p2p as (
    select
        e.job_id,
        count(*) as edges,
        count(*) filter (where back.src is not null) / count(*) as mutual_share,
        case when bool_or(m.job_id is not null) then count(s.src) / count(*) end as in_group_share,
        bool_or(e.ids) as ids,
        bool_or(e.floating) as floats
    from edges e
    left join edges back on back.job_id = e.job_id and back.src = e.dst and back.dst = e.src
    left join shared s on s.job_id = e.job_id and s.src = e.src and s.dst = e.dst
    left join (select distinct job_id from members) m on m.job_id = e.job_id
    group by e.job_id
),
p2p_shape as (
    select
        p.job_id,
        p.mutual_share,
        p.in_group_share,
        p.ids,
        p.floats,
        d.max_peers,
        case
            when d.max_peers >= k.mesh_peers then 'all-to-all'
            when p.mutual_share = 0 and d.one_way_ring then 'ring'
            when p.in_group_share = 1 then 'in-group'
            else 'pipeline'
        end as p2p_kind
    from p2p p
    cross join constants k
    join (
        select job_id, max(peers) as max_peers, bool_and(sends_to = 1 and receives_from = 1) as one_way_ring
        from degrees
        group by job_id
    ) d using (job_id)
),
-- Send/recv data calls by what they are part of (where no peer is recorded: a pipeline).
p2p_calls as (
    select
        c.job_id,
        coalesce(sum(c.calls) filter (where coalesce(s.p2p_kind, 'pipeline') = 'pipeline'), 0) as pipeline_calls,
        coalesce(sum(c.calls) filter (where s.p2p_kind = 'all-to-all'), 0) as mesh_calls,
        coalesce(sum(c.calls) filter (where s.p2p_kind in ('ring', 'in-group')), 0) as dp_p2p_calls,
        any_value(case when s.p2p_kind is null then 'unknown peers' else s.p2p_kind end) as p2p_kind
    from collective_peers c
    cross join constants k
    left join p2p_shape s using (job_id)
    where c.in_bytes is null or c.in_bytes > k.data_bytes
    group by c.job_id
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
        g.allreduce_modal_dtype,
        coalesce(e.uneven_alltoall, false) as uneven_alltoall,
        coalesce(e.wire_bytes, 0) as wire_bytes,
        e.allreduce_wire / nullif(e.wire_bytes, 0) as allreduce_wire_share,
        e.gather_scatter_wire / nullif(e.wire_bytes, 0) as gather_scatter_wire_share,
        e.alltoall_wire / nullif(e.wire_bytes, 0) as alltoall_wire_share,
        e.p2p_wire / nullif(e.wire_bytes, 0) as p2p_wire_share,
        coalesce((e.alltoall_calls + coalesce(c.mesh_calls, 0)) / nullif(e.data_calls, 0), 0)
            as alltoall_family_share,
        coalesce(g.alltoall_ids, false) or coalesce(s.p2p_kind = 'all-to-all' and s.ids, false) as alltoall_ids,
        coalesce(g.alltoall_floats, false) or coalesce(s.p2p_kind = 'all-to-all' and s.floats, false)
            as alltoall_activations,
        c.p2p_kind,
        s.max_peers as p2p_max_peers,
        s.mutual_share as p2p_mutual_share,
        s.in_group_share as p2p_in_group_share,
        coalesce(c.pipeline_calls / nullif(e.ranks_seen, 0), 0) as pipeline_calls_per_rank,
        coalesce(g.tp_calls / nullif(e.data_calls, 0), 0) as tp_share,
        coalesce(g.host_groups, 0) as host_groups,
        coalesce(r.replica_calls / nullif(g.host_scatter_calls, 0), 0) as replica_share,
        coalesce(pe.paired_calls / nullif(e.data_calls, 0), 0) as paired_share,
        coalesce(
            (e.allreduce_calls + coalesce(g.broadcast_calls, 0) + coalesce(pe.unpaired_gathers, 0)
                + coalesce(c.dp_p2p_calls, 0))
                / nullif(e.data_calls, 0),
            0
        ) as dp_share,
        coalesce(e.allreduce_calls, 0) + coalesce(c.dp_p2p_calls, 0) > 0 as gradient_sync
    from job_size z
    left join evidence e using (job_id)
    left join allreduce_mode m using (job_id)
    left join group_evidence g using (job_id)
    left join pair_evidence pe using (job_id)
    left join replicas r using (job_id)
    left join p2p_calls c using (job_id)
    left join p2p_shape s using (job_id)
),
labels as (
    select job_id, case when contains(label, ':') then nullif(split_part(label, ':', 1), '') end as label_class
    from jobs
),
rules as (
    select
        s.*,
        s.alltoall_family_share >= k.alltoall_min as has_alltoall,
        s.pipeline_calls_per_rank >= k.pipeline_per_rank as has_pipeline,
        s.tp_share >= k.tp_min and s.replica_share < k.replica_per_scatter as has_tensor_parallel,
        s.job_gpus <= k.host_gpus
            and s.alltoall_family_share < k.alltoall_min
            and s.allreduce_share >= k.allreduce_min
            and s.allreduce_modal_share >= k.modal_min
            and s.allreduce_calls_per_rank >= k.modal_per_rank
            and coalesce(s.allreduce_modal_dtype not in ('Float', 'Double'), true) as has_host_tensor_parallel,
        s.paired_share >= k.paired_min as has_sharded_data_parallel,
        s.dp_share >= k.dp_min and s.gradient_sync as has_data_parallel
    from shares s, constants k
),
inferred as (
    select
        r.*,
        case
            when r.has_alltoall and not r.alltoall_ids
                and (r.alltoall_activations or r.has_pipeline or r.has_tensor_parallel) then 1
            when r.has_pipeline then 2
            when r.has_tensor_parallel then 3
            when r.has_host_tensor_parallel then 4
            when r.has_sharded_data_parallel then 5
            when r.has_alltoall then 6
            when r.has_data_parallel then 7
            else 8
        end as rule
    from rules r
)
select
    j.job_id,
    j.label,
    case when contains(j.label, ':') then nullif(split_part(j.label, ':', 2), '') else j.label end as model,
    coalesce(l.label_class, c.inferred_class) as class,
    case when l.label_class is null then 'inferred' else 'label' end as class_source,
    c.inferred_class,
    l.label_class,
    coalesce(l.label_class <> c.inferred_class, false) as overridden,
    i.rule,
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
    i.allreduce_modal_dtype,
    i.uneven_alltoall,
    i.max_group_size,
    i.group_sizes,
    i.wire_bytes,
    i.allreduce_wire_share,
    i.gather_scatter_wire_share,
    i.alltoall_wire_share,
    i.p2p_wire_share,
    i.alltoall_family_share,
    i.alltoall_ids,
    i.alltoall_activations,
    i.p2p_kind,
    i.p2p_max_peers,
    i.p2p_mutual_share,
    i.p2p_in_group_share,
    i.pipeline_calls_per_rank,
    i.tp_share,
    i.host_groups,
    i.replica_share,
    i.paired_share,
    i.dp_share
from jobs j
join inferred i using (job_id)
join labels l using (job_id)
join (values (1, 'moe'), (2, 'llm-3d'), (3, 'llm-3d'), (4, 'llm-3d'), (5, 'fsdp'), (6, 'ranking-ddp'),
    (7, 'ddp'), (8, 'other')) c (rule, inferred_class) using (rule);
