-- name: message_size_percentiles
-- answers: What are the median, p90 and p99 message sizes of each collective type, per class and
--          model, in bytes passed in, in elements (where recorded) and in bytes sent on the wire?
-- params: none
-- returns: class, model, comm_type, jobs, calls (all ranks), p50_bytes, p90_bytes, p99_bytes,
--          p50_elems, p90_elems, p99_elems, p50_wire_bytes, in_bytes, wire_bytes
-- rule: percentiles are over calls, as quantile_disc (in_bytes, in_elems) and quantile_cont (wire_bytes)
--          compute them over every collectives row, here from the counts of collective_sizes.
with calls as (
    select k.class, k.model, c.job_id, c.comm_type, c.in_bytes, c.in_elems, c.calls, c.wire_bytes
    from collective_sizes c
    join job_class k using (job_id)
),
totals as (
    select
        class,
        model,
        comm_type,
        count(distinct job_id) as jobs,
        cast(sum(calls) as bigint) as calls,
        cast(sum(calls::hugeint * in_bytes) as bigint) as in_bytes,
        sum(wire_bytes) as wire_bytes
    from calls
    group by all
),
-- each value's calls counted up to it (size order) and in all, per class, model and comm_type
bytes as (
    select
        class,
        model,
        comm_type,
        in_bytes as v,
        sum(sum(calls)) over (partition by class, model, comm_type order by in_bytes) as up_to,
        sum(sum(calls)) over (partition by class, model, comm_type) as n
    from calls
    where in_bytes is not null
    group by class, model, comm_type, in_bytes
),
elems as (
    select
        class,
        model,
        comm_type,
        in_elems as v,
        sum(sum(calls)) over (partition by class, model, comm_type order by in_elems) as up_to,
        sum(sum(calls)) over (partition by class, model, comm_type) as n
    from calls
    where in_elems is not null
    group by class, model, comm_type, in_elems
),
wire as (
    select
        class,
        model,
        comm_type,
        wire_bytes / calls as v,
        sum(sum(calls)) over (partition by class, model, comm_type order by wire_bytes / calls) as up_to,
        sum(sum(calls)) over (partition by class, model, comm_type) as n
    from calls
    where wire_bytes is not null
    group by class, model, comm_type, wire_bytes / calls
),
-- quantile_disc(q): the first value whose calls up to it reach ceil(q * n)
bytes_q as (
    select
        class,
        model,
        comm_type,
        min(v) filter (where up_to >= ceil(0.5::double * n)) as p50,
        min(v) filter (where up_to >= ceil(0.9::double * n)) as p90,
        min(v) filter (where up_to >= ceil(0.99::double * n)) as p99
    from bytes
    group by all
),
elems_q as (
    select
        class,
        model,
        comm_type,
        min(v) filter (where up_to >= ceil(0.5::double * n)) as p50,
        min(v) filter (where up_to >= ceil(0.9::double * n)) as p90,
        min(v) filter (where up_to >= ceil(0.99::double * n)) as p99
    from elems
    group by all
),
-- quantile_cont(0.5): the values at 0-based positions floor and ceil of (n - 1) / 2, interpolated
wire_q as (
    select
        class,
        model,
        comm_type,
        (any_value(n) - 1) * 0.5::double as pos,
        min(v) filter (where up_to > floor((n - 1) * 0.5::double)) as lo,
        min(v) filter (where up_to > ceil((n - 1) * 0.5::double)) as hi
    from wire
    group by all
)
select
    t.class,
    t.model,
    t.comm_type,
    t.jobs,
    t.calls,
    b.p50 as p50_bytes,
    b.p90 as p90_bytes,
    b.p99 as p99_bytes,
    e.p50 as p50_elems,
    e.p90 as p90_elems,
    e.p99 as p99_elems,
    case when floor(w.pos) = w.pos then w.lo else w.lo + (w.pos - floor(w.pos)) * (w.hi - w.lo) end
        as p50_wire_bytes,
    t.in_bytes,
    t.wire_bytes
from totals t
left join bytes_q b
    on b.class is not distinct from t.class and b.model is not distinct from t.model
    and b.comm_type is not distinct from t.comm_type
left join elems_q e
    on e.class is not distinct from t.class and e.model is not distinct from t.model
    and e.comm_type is not distinct from t.comm_type
left join wire_q w
    on w.class is not distinct from t.class and w.model is not distinct from t.model
    and w.comm_type is not distinct from t.comm_type
order by t.class, t.model nulls last, t.comm_type;
