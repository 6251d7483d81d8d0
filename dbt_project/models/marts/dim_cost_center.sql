-- Cost centers with their business unit.
select
    cost_center_id,
    cost_center_name,
    business_unit,
    created_on,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_cost_centers') }}
