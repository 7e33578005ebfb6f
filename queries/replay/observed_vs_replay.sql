-- name: observed_vs_replay
-- answers: Does the replay send what NCCL sent? For every transfer NCCL's proxy observed (NCCL
--          Inspector proxy_op records: table observed), per operation, observing rank, direction,
--          peer and channel, the bytes observed beside the replay's network bytes of that rank,
--          direction, peer and channel in the same operation, and the difference. A collective is
--          matched by (communicator, name, sequence number); a communicator's point-to-point
--          operations are compared together (op_name 'p2p'). Replay bytes on a channel or to a peer
--          nothing was observed on are rows too (observed_bytes 0): the channel model's difference.
-- params: none
-- returns: collective_id, pg_name, op_name, seq, rank, direction, peer, channel, observed_bytes,
--          replay_bytes (null: no operation of the replay matched), difference (replay - observed,
--          in bytes), relative_difference (difference / observed_bytes)
with observed_ops as (
    select
        case when o.parent_type = 'p2p' then 'p2p ' || o.pg_name else 'c' || c.collective_id end as op_key,
        c.collective_id,
        o.pg_name,
        case when o.parent_type = 'p2p' then 'p2p' else coalesce(c.op_name, o.parent_op) end as op_name,
        case when o.parent_type = 'coll' then o.parent_seq end as seq,
        o.rank, o.direction, o.peer, o.channel, o.bytes
    from observed as o
    left join collectives as c
        on o.parent_type = 'coll' and c.pg_name = o.pg_name and c.op_name = o.parent_op
        and c.match_key = 's' || o.parent_seq
),
observed_cells as (
    select
        op_key, any_value(collective_id) as collective_id, any_value(pg_name) as pg_name,
        any_value(op_name) as op_name, any_value(seq) as seq, rank, direction, peer, channel,
        sum(bytes) as observed_bytes
    from observed_ops
    group by op_key, rank, direction, peer, channel,
        -- a record of no known operation stays a row of its own
        case when op_key is null then concat_ws(' ', pg_name, op_name, seq) end
),
observers as (
    select distinct op_key, rank, direction from observed_cells where op_key is not null
),
network_flows as (
    select
        case when c.comm_type in ('SEND', 'RECV') then 'p2p ' || c.pg_name else 'c' || c.collective_id end
            as op_key,
        c.collective_id, c.pg_name, c.comm_type, c.op_name, c.match_key,
        f.src_rank, f.dst_rank, f.channel, f.bytes
    from flows as f
    join collectives as c using (collective_id)
    where f.link = 'network'
),
replay_cells as (
    select
        x.op_key,
        any_value(case when f.comm_type in ('SEND', 'RECV') then null else f.collective_id end) as collective_id,
        any_value(f.pg_name) as pg_name,
        any_value(case when f.comm_type in ('SEND', 'RECV') then 'p2p' else f.op_name end) as op_name,
        any_value(case when f.match_key like 's%' then try_cast(substr(f.match_key, 2) as bigint) end) as seq,
        x.rank, x.direction,
        case when x.direction = 'send' then f.dst_rank else f.src_rank end as peer,
        f.channel,
        sum(f.bytes) as replay_bytes
    from network_flows as f
    join observers as x
        on x.op_key = f.op_key
        and ((x.direction = 'send' and f.src_rank = x.rank) or (x.direction = 'recv' and f.dst_rank = x.rank))
    group by all
)
select
    coalesce(o.collective_id, r.collective_id) as collective_id,
    coalesce(o.pg_name, r.pg_name) as pg_name,
    coalesce(o.op_name, r.op_name) as op_name,
    coalesce(o.seq, r.seq) as seq,
    coalesce(o.rank, r.rank) as rank,
    coalesce(o.direction, r.direction) as direction,
    coalesce(o.peer, r.peer) as peer,
    coalesce(o.channel, r.channel) as channel,
    try_cast(coalesce(o.observed_bytes, 0) as bigint) as observed_bytes,
    case when coalesce(o.op_key, r.op_key) is not null then try_cast(coalesce(r.replay_bytes, 0) as bigint) end
        as replay_bytes,
    cast(coalesce(r.replay_bytes, 0) as double) - coalesce(o.observed_bytes, 0) as difference,
    (cast(coalesce(r.replay_bytes, 0) as double) - o.observed_bytes) / nullif(o.observed_bytes, 0)
        as relative_difference
from observed_cells as o
full join replay_cells as r
    on o.op_key = r.op_key and o.rank = r.rank and o.direction = r.direction
    and o.peer is not distinct from r.peer and o.channel is not distinct from r.channel
order by collective_id nulls last, pg_name, op_name, seq, rank, direction, peer, channel;
