-- name: collective_wire_bytes
-- answers: How many bytes does each rank send on the wire for each collective of a job, under the
--          textbook ring/direct algorithms? Every collectives row of the job with its wire_bytes: the one
--          place this rule is written; every mix and size view reads it from here (the rollups and fleet
--          queries with a NULL job_id: every job's rows).
-- params: $job_id (string or NULL: the job; NULL for every job)
-- returns: every column of collectives, wire_bytes (double; null where in_bytes or group_size is unknown
--          or group_size is below 1)
-- rule: S = in_bytes (Chakra's comm_size, the bytes this rank passes in), n = group_size.
--          ALL_REDUCE      2(n-1)/n * S   ring: a reduce-scatter and an all-gather of S/n chunks
--          ALL_GATHER      (n-1) * S      ring: S is the local shard, sent on n-1 times
--          REDUCE_SCATTER  (n-1)/n * S    ring: S is the full input, one S/n chunk stays
--          ALL_TO_ALL      (n-1)/n * S    direct: S is the whole send buffer, 1/n of it stays local
--                                          (all-to-allv: the even-split value, not S minus the own split)
--          BROADCAST, REDUCE, GATHER, SCATTER   (n-1)/n * S   the (n-1)*S that ring and direct both put
--                                          on the wire, spread evenly over the n ranks (the data model does
--                                          not record the root, so the share of each rank is not known)
--          SEND, PUT  S (a put writes S into one peer's memory);  RECV 0 (the sender carries the
--          message);  BARRIER, SIGNAL 0;  any group of one 0
--          Summed over the n ranks of one collective, wire_bytes is what the ring or direct algorithm
--          sends in total: 2(n-1)*S for an all-reduce, n(n-1)*S for an all-gather of S-byte shards.
--          This is not in_bytes: an all-gather passes in only its shard but sends it n-1 times.
--          tracekit's replay refines it per algorithm; its ring/direct totals equal these sums.
select
    c.*,
    case
        when c.comm_type in ('SEND', 'PUT') then cast(c.in_bytes as double)
        when c.comm_type in ('RECV', 'BARRIER', 'SIGNAL') then 0.0
        when c.group_size = 1 then 0.0
        when c.group_size < 1 then null  -- no group (a hand-edited dataset): unknown, never -inf
        when c.comm_type = 'ALL_REDUCE' then 2.0 * (c.group_size - 1) / c.group_size * c.in_bytes
        when c.comm_type = 'ALL_GATHER' then 1.0 * (c.group_size - 1) * c.in_bytes
        when c.comm_type in ('REDUCE_SCATTER', 'ALL_TO_ALL', 'BROADCAST', 'REDUCE', 'GATHER', 'SCATTER')
            then 1.0 * (c.group_size - 1) / c.group_size * c.in_bytes
    end as wire_bytes
from collectives c
where $job_id is null or c.job_id = $job_id;
