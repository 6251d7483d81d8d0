-- Which cost center each user belongs to, SCD2 (class cost_center_membership), with its business unit.
select
    md5(m.user_id || '|' || m.source_seq) as membership_key,
    m.user_id,
    m.cost_center_id,
    cc.business_unit,
    m.valid_from,
    m.valid_to,
    m.source_seq
from {{ ref('stg_cost_center_memberships') }} as m
left join {{ ref('stg_cost_centers') }} as cc on cc.cost_center_id = m.cost_center_id
