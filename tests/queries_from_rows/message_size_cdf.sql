-- name: message_size_cdf
-- answers: How big are the messages of each collective type, per class and model? A log2 histogram
--          of in_bytes and of in_elems (elements: where the trace records the element type) with the
--          cumulative share of calls: the points of the message-size CDF.
-- params: none
-- returns: class, model (null for unlabelled jobs), comm_type, unit ('bytes' or 'elements'),
--          log2_bin, size_lo (2^log2_bin), size_hi (2^(log2_bin+1)), calls (all ranks), share,
--          cum_share (share of the group's calls smaller than size_hi), wire_bytes
with sized as (
    select k.class, k.model, c.comm_type, 'bytes' as unit, c.in_bytes as size, c.wire_bytes
    from collective_wire_bytes(null) c
    join job_class k using (job_id)
    where c.in_bytes > 0
    union all
    select k.class, k.model, c.comm_type, 'elements' as unit, c.in_elems as size, c.wire_bytes
    from collective_wire_bytes(null) c
    join job_class k using (job_id)
    where c.in_elems > 0
),
binned as (
    select
        class,
        model,
        comm_type,
        unit,
        cast(floor(log2(size)) as integer) as log2_bin,
        count(*) as calls,
        sum(wire_bytes) as wire_bytes
    from sized
    group by all
)
select
    class,
    model,
    comm_type,
    unit,
    log2_bin,
    pow(2, log2_bin) as size_lo,
    pow(2, log2_bin + 1) as size_hi,
    calls,
    calls / sum(calls) over w as share,
    sum(calls) over (w order by log2_bin) / sum(calls) over w as cum_share,
    wire_bytes
from binned
window w as (partition by class, model, comm_type, unit)
order by class, model nulls last, comm_type, unit, log2_bin;
