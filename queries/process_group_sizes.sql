-- name: process_group_sizes
-- answers: What kinds of process groups (pg_desc) does each job have, how many, and of what sizes?
-- params: none
-- returns: job_id, label, world_size, pg_desc, groups, min_size, max_size
select
    g.job_id,
    j.label,
    j.world_size,
    g.pg_desc,
    count(*) as groups,
    min(g.group_size) as min_size,
    max(g.group_size) as max_size
from process_groups g
join jobs j using (job_id)
group by all
order by g.job_id, g.pg_desc;
