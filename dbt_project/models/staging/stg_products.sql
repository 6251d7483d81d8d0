select
    product_id,
    product_name,
    vendor_id,
    license_model,
    api_access,
    valid_from as listed_on,
    valid_from,
    valid_to,
    source_seq
from {{ source('raw', 'products') }}
