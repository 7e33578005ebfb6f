-- name: job_bandwidth
-- answers: In one job, what bus bandwidth do the collectives of each type reach at each message size?
--          Per comm_type and log2 bin of nccl-tests' size (collective_bandwidth): timed calls, median
--          duration, and the median, p10 and p90 of algorithm and bus bandwidth.
-- params: $job_id (string: the job)
-- returns: comm_type, log2_bin, size_lo, size_hi, calls, p50_duration_us, p50_algbw_gbps,
--          p50_busbw_gbps, p10_busbw_gbps, p90_busbw_gbps
select
    comm_type,
    cast(floor(log2(nccl_bytes)) as integer) as log2_bin,
    pow(2, floor(log2(nccl_bytes))) as size_lo,
    pow(2, floor(log2(nccl_bytes)) + 1) as size_hi,
    count(*) as calls,
    median(duration_us) as p50_duration_us,
    median(algbw_gbps) as p50_algbw_gbps,
    median(busbw_gbps) as p50_busbw_gbps,
    quantile_cont(busbw_gbps, 0.1) as p10_busbw_gbps,
    quantile_cont(busbw_gbps, 0.9) as p90_busbw_gbps
from collective_bandwidth($job_id)
where nccl_bytes > 0
group by all
order by comm_type, log2_bin;
