-- name: dataset_overview
-- answers: What does the dataset hold? One row: jobs (labelled, with a start time), ranks seen, trace
--          files (and those that failed), collective calls, bytes passed in and on the wire, the span
--          of start times, and how many calls record a group size, an element count and a duration.
-- params: none
-- returns: jobs, labelled_jobs, jobs_with_start, first_started_at, last_started_at, ranks_seen,
--          traces, traces_failed, calls, in_bytes, wire_bytes, group_size_known_share,
--          elems_known_share, timed_share
with j as (
    select
        count(*) as jobs,
        count(label) as labelled_jobs,
        count(started_at) as jobs_with_start,
        min(started_at) as first_started_at,
        max(started_at) as last_started_at
    from jobs
),
t as (
    select
        count(*) filter (where path is not null) as traces,
        count(*) filter (where path is not null and status = 'error') as traces_failed
    from traces
),
r as (
    select coalesce(sum(ranks_seen), 0) as ranks_seen from job_class
),
c as (
    select
        cast(coalesce(sum(calls), 0) as bigint) as calls,
        coalesce(sum(calls::hugeint * in_bytes), 0) as in_bytes,
        coalesce(sum(wire_bytes), 0) as wire_bytes,
        coalesce(sum(calls) filter (where group_size is not null), 0) / sum(calls) as group_size_known_share,
        coalesce(sum(calls) filter (where in_elems is not null), 0) / sum(calls) as elems_known_share,
        coalesce(sum(calls) filter (where timed), 0) / sum(calls) as timed_share
    from collective_sizes
)
select
    j.jobs,
    j.labelled_jobs,
    j.jobs_with_start,
    j.first_started_at,
    j.last_started_at,
    r.ranks_seen,
    t.traces,
    t.traces_failed,
    c.calls,
    c.in_bytes,
    c.wire_bytes,
    c.group_size_known_share,
    c.elems_known_share,
    c.timed_share
from j, t, r, c;
