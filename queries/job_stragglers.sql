-- name: job_stragglers
-- answers: In one job, how far apart do the ranks start and finish each collective? The calls of one
--          collective on its ranks are matched by process group and sequence number (where the trace
--          records none: by their order on each rank among calls of the same group and type), and each
--          collective gets the spread of its start times and durations and the rank that came last.
-- params: $job_id (string: the job)
-- returns: instance (order of first start), pg_name, seq, comm_type, ranks, in_bytes, start_us (from the
--          job's first start), start_spread_us, last_rank (started last; the lowest of those tied;
--          null when all started together), min_duration_us, max_duration_us, slowest_rank (longest
--          duration, likewise), end_spread_us
-- rule: start times are compared across ranks as recorded: they mean something only where the ranks'
--          clocks agree (one host, or synchronised hosts). Send/recv and collectives seen on one rank only
--          are left out.
with timed as (
    select
        rank,
        coalesce(pg_name, '') as pg_key,
        pg_name,
        comm_type,
        in_bytes,
        start_us,
        duration_us,
        coalesce(
            seq,
            row_number() over (partition by rank, coalesce(pg_name, ''), comm_type order by start_us, op_id)
        ) as match_seq,
        seq is not null as has_seq
    from collectives
    where job_id = $job_id and start_us is not null and comm_type not in ('SEND', 'RECV')
),
matched as (
    select
        pg_name,
        case when bool_and(has_seq) then min(match_seq) end as seq,
        min(comm_type) as comm_type,
        count(distinct rank) as ranks,
        max(in_bytes) as in_bytes,
        min(start_us) as first_start_us,
        max(start_us) - min(start_us) as start_spread_us,
        case when max(start_us) > min(start_us) then arg_max(rank, [start_us, -rank]) end as last_rank,
        min(duration_us) as min_duration_us,
        max(duration_us) as max_duration_us,
        case when max(duration_us) > min(duration_us) then arg_max(rank, [duration_us, -rank]) end
            as slowest_rank,
        max(start_us + duration_us) - min(start_us + duration_us) as end_spread_us
    from timed
    group by pg_key, pg_name, case when has_seq then '' else comm_type end, match_seq
    having count(distinct rank) > 1
)
select
    row_number() over (order by first_start_us, pg_name, seq) as instance,
    pg_name,
    seq,
    comm_type,
    ranks,
    in_bytes,
    first_start_us - min(first_start_us) over () as start_us,
    start_spread_us,
    last_rank,
    min_duration_us,
    max_duration_us,
    slowest_rank,
    end_spread_us
from matched
order by instance;
