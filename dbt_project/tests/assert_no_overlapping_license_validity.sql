-- A license has at most one holder on any day: no two holdings of one license overlap.
{{ config(store_failures_as='view') }}

select
    a.license_id,
    a.user_id as first_holder,
    a.valid_from as first_from,
    a.valid_to as first_to,
    b.user_id as second_holder,
    b.valid_from as second_from,
    b.valid_to as second_to
from {{ ref('fct_license_assignment') }} as a
inner join {{ ref('fct_license_assignment') }} as b
    on
        b.license_id = a.license_id
        and b.assignment_key <> a.assignment_key
        and (b.valid_from, b.source_seq) > (a.valid_from, a.source_seq)
where
    a.valid_from < coalesce(b.valid_to, 'infinity'::date)
    and b.valid_from < coalesce(a.valid_to, 'infinity'::date)
