select
    cost_center_id,
    cost_center_name,
    business_unit,
    valid_from as created_on,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'cost_centers') }}
