-- name: alltoallv_matrix
-- answers: In one job, how many bytes does each rank send to each other rank through all-to-all calls
--          whose per-peer splits are recorded? The rank x rank volume matrix (cells of $ranks_per_cell
--          consecutive ranks, e.g. 8 for one cell per 8-GPU host).
-- params: $job_id (string: the job), $ranks_per_cell (integer 1..1048576: 1 for rank x rank)
-- returns: src, dst (first global rank of each cell), bytes, calls, uneven_calls
-- rule: split k of a call (in_splits, in group order) goes to the group's k-th rank (process_groups.ranks;
--          the global rank k where the group's ranks are not recorded and it spans the job); its bytes are
--          in_bytes * split / sum(splits), which holds whether the splits count elements or rows.
with calls as (
    select
        c.rank,
        c.in_bytes,
        c.in_splits,
        coalesce(c.is_uneven, false) as is_uneven,
        g.ranks as group_ranks,
        list_sum(c.in_splits) as split_total
    from collectives c
    left join process_groups g on g.job_id = c.job_id and g.pg_name = c.pg_name
    where c.job_id = $job_id and c.comm_type = 'ALL_TO_ALL' and len(c.in_splits) > 0 and c.in_bytes > 0
),
parts as (
    select
        rank,
        is_uneven,
        in_bytes::hugeint * split / split_total as bytes,
        case
            when len(group_ranks) >= peer then group_ranks[peer]
            else peer - 1
        end as dst
    from calls, unnest(in_splits) with ordinality as s(split, peer)
    where split_total > 0
)
select
    cast(rank // $ranks_per_cell * $ranks_per_cell as integer) as src,
    cast(dst // $ranks_per_cell * $ranks_per_cell as integer) as dst,
    sum(bytes) as bytes,
    count(*) as calls,
    count(*) filter (where is_uneven) as uneven_calls
from parts
group by all
order by src, dst;
