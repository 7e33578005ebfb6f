-- name: nccl_algorithms
-- answers: Across the fleet, which algorithm and protocol did NCCL run for each collective type and
--          message size, how often, and what bus bandwidth did NCCL itself report? Per comm_type,
--          log2 bin of NCCL's per-rank message size, algorithm and protocol (NCCL Inspector's
--          records: table observed_collectives; algorithm and protocol null before Inspector v4.2):
--          calls, jobs, median duration, median, p10 and p90 of NCCL's bus bandwidth, and the share
--          of calls timed on the GPU (the others' times include launch and queueing).
-- params: none
-- returns: comm_type, log2_bin, size_lo, size_hi, algorithm, protocol, calls, jobs,
--          p50_duration_us, p50_busbw_gbs, p10_busbw_gbs, p90_busbw_gbs, gpu_timed_share
select
    comm_type,
    cast(floor(log2(msg_bytes)) as integer) as log2_bin,
    pow(2, floor(log2(msg_bytes))) as size_lo,
    pow(2, floor(log2(msg_bytes)) + 1) as size_hi,
    algorithm,
    protocol,
    count(*) as calls,
    count(distinct job_id) as jobs,
    median(duration_us) as p50_duration_us,
    median(busbw_gbs) as p50_busbw_gbs,
    quantile_cont(busbw_gbs, 0.1) as p10_busbw_gbs,
    quantile_cont(busbw_gbs, 0.9) as p90_busbw_gbs,
    avg(case when timing_source = 'kernel_gpu' then 1.0 else 0.0 end) as gpu_timed_share
from observed_collectives
where msg_bytes > 0
group by all
order by comm_type, log2_bin, algorithm nulls last, protocol nulls last;
