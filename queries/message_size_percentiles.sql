-- name: message_size_percentiles
-- answers: What are the median, p90 and p99 message sizes of each collective type, per class and
--          model, in bytes passed in, in elements (where recorded) and in bytes sent on the wire?
-- params: none
-- returns: class, model, comm_type, jobs, calls (all ranks), p50_bytes, p90_bytes, p99_bytes,
--          p50_elems, p90_elems, p99_elems, p50_wire_bytes, in_bytes, wire_bytes
-- rule: percentiles are over calls, as quantile_disc (in_bytes, in_elems) and quantile_cont (wire_bytes)
--          compute them over every collectives row, here exactly from the counts of collective_sizes:
--          the calls are counted in narrow bins of each value (floor(64 * value^(1/4)), in the same order
--          as the values), and only the bins that hold a sought rank are sorted value by value.
with kinds as (
    -- each class and model as a number, and each comm_type (collective_ranks: per job, op and type)
    select job_id, class, model, dense_rank() over (order by class, model) as cm
    from job_class
),
types as (
    select comm_type, row_number() over (order by comm_type) as ct
    from (select distinct comm_type from collective_ranks where not whole_job)
),
-- g: one number per class, model and comm_type (ct < 2^32)
groups as (
    select k.cm * 4294967296 + t.ct as g, any_value(k.class) as class, any_value(k.model) as model,
        any_value(t.comm_type) as comm_type, count(*) as jobs
    from (select distinct job_id, comm_type from collective_ranks where not whole_job) j
    join kinds k using (job_id)
    join types t on t.comm_type is not distinct from j.comm_type
    group by all
),
-- each kind of call with its value per call in each unit and the bin of each (v <= 0: bin -1)
calls as (
    select
        k.cm * 4294967296 + t.ct as g,
        c.calls,
        c.in_bytes,
        c.in_elems,
        c.wire_bytes,
        c.wire_bytes / c.calls as wire,
        case when c.in_bytes > 0 then floor(sqrt(sqrt(c.in_bytes)) * 64) when c.in_bytes <= 0 then -1 end
            as bytes_bin,
        case when c.in_elems > 0 then floor(sqrt(sqrt(c.in_elems)) * 64) when c.in_elems <= 0 then -1 end
            as elems_bin,
        case when c.wire_bytes / c.calls > 0 then floor(sqrt(sqrt(c.wire_bytes / c.calls)) * 64)
            when c.wire_bytes / c.calls <= 0 then -1 end as wire_bin
    from collective_sizes c
    join kinds k using (job_id)
    join types t on t.comm_type is not distinct from c.comm_type
),
-- collective_ops: the calls and bytes of each job per op name and comm_type
totals as (
    select
        k.cm * 4294967296 + t.ct as g,
        cast(sum(o.calls) as bigint) as calls,
        sum(o.in_bytes) as in_bytes,
        sum(o.wire_bytes) as wire_bytes
    from collective_ops o
    join kinds k using (job_id)
    join types t on t.comm_type is not distinct from o.comm_type
    group by all
),
-- the calls in each bin of each unit (1 bytes, 2 elements, 3 wire bytes per call)
counted as (
    select
        g,
        case grouping(bytes_bin, elems_bin, wire_bin) when 3 then 1 when 5 then 2 when 6 then 3 end as unit,
        coalesce(bytes_bin, elems_bin, wire_bin) as bin,
        sum(calls) as calls
    from calls
    group by grouping sets ((g, bytes_bin), (g, elems_bin), (g, wire_bin))
),
-- per bin: the calls in the bins below it, up to it, and in all
bins as (
    select
        g,
        unit,
        bin,
        sum(calls) over w - calls as below,
        sum(calls) over w as up_to,
        sum(calls) over (partition by g, unit) as n
    from counted
    where bin is not null
    window w as (partition by g, unit order by bin)
),
-- the 1-based rank sought and the bin holding it. quantile_disc(q): the first value whose calls up to
-- it reach ceil(q * n); quantile_cont(0.5): the values at 0-based positions floor and ceil of (n - 1) / 2
wanted as (
    select b.g, b.unit, b.bin, b.below, b.n, q.name, q.r
    from bins b,
    lateral (
        select *
        from (values
            (1, 'p50', ceil(0.5::double * b.n)),
            (1, 'p90', ceil(0.9::double * b.n)),
            (1, 'p99', ceil(0.99::double * b.n)),
            (2, 'p50', ceil(0.5::double * b.n)),
            (2, 'p90', ceil(0.9::double * b.n)),
            (2, 'p99', ceil(0.99::double * b.n)),
            (3, 'lo', floor((b.n - 1) * 0.5::double) + 1),
            (3, 'hi', ceil((b.n - 1) * 0.5::double) + 1)
        ) t(unit, name, r)
        where t.unit = b.unit
    ) q
    where q.r > b.below and q.r <= b.up_to
),
-- the values of those bins only, each with the calls up to it within its bin
candidates as (
    select c.g, 1 as unit, c.bytes_bin as bin, c.in_bytes as exact, null::double as v, c.calls
    from calls c
    semi join wanted w on w.g = c.g and w.unit = 1 and w.bin = c.bytes_bin
    union all
    select c.g, 2, c.elems_bin, c.in_elems, null, c.calls
    from calls c
    semi join wanted w on w.g = c.g and w.unit = 2 and w.bin = c.elems_bin
    union all
    select c.g, 3, c.wire_bin, null, c.wire, c.calls
    from calls c
    semi join wanted w on w.g = c.g and w.unit = 3 and w.bin = c.wire_bin
),
ranked as (
    select *, sum(calls) over (partition by g, unit, bin order by exact, v) as up_to_in
    from candidates
),
found as (
    select
        w.g,
        w.unit,
        w.name,
        any_value(w.n) as n,
        min(r.exact) filter (where w.below + r.up_to_in >= w.r) as exact,
        min(r.v) filter (where w.below + r.up_to_in >= w.r) as v
    from wanted w
    join ranked r on r.g = w.g and r.unit = w.unit and r.bin = w.bin
    group by w.g, w.unit, w.name
),
picked as (
    select
        g,
        min(exact) filter (where unit = 1 and name = 'p50') as p50_bytes,
        min(exact) filter (where unit = 1 and name = 'p90') as p90_bytes,
        min(exact) filter (where unit = 1 and name = 'p99') as p99_bytes,
        min(exact) filter (where unit = 2 and name = 'p50') as p50_elems,
        min(exact) filter (where unit = 2 and name = 'p90') as p90_elems,
        min(exact) filter (where unit = 2 and name = 'p99') as p99_elems,
        (any_value(n) filter (where unit = 3) - 1) * 0.5::double as pos,
        min(v) filter (where unit = 3 and name = 'lo') as lo,
        min(v) filter (where unit = 3 and name = 'hi') as hi
    from found
    group by g
)
select
    k.class,
    k.model,
    k.comm_type,
    k.jobs,
    t.calls,
    p.p50_bytes,
    p.p90_bytes,
    p.p99_bytes,
    p.p50_elems,
    p.p90_elems,
    p.p99_elems,
    case when floor(p.pos) = p.pos then p.lo else p.lo + (p.pos - floor(p.pos)) * (p.hi - p.lo) end
        as p50_wire_bytes,
    t.in_bytes,
    t.wire_bytes
from totals t
join groups k using (g)
left join picked p using (g)
order by k.class, k.model nulls last, k.comm_type;
