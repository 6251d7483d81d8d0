-- Products with their vendor and license model (descriptive only: spend never depends on it).
-- A product does not change once listed; its list price is fct_price, its vendor's name dim_vendor.
select
    product_id,
    product_name,
    vendor_id,
    license_model,
    api_access,
    listed_on,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_products') }}
