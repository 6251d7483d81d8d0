-- Contract ids known on as_of_day (terms live only in the contract documents).
select
    d.date_day as as_of_day,
    c.contract_id,
    c.valid_from as known_since
from {{ ref('dim_date') }} as d
inner join {{ ref('stg_contracts') }} as c on {{ holds_on('c', 'd.date_day') }}
