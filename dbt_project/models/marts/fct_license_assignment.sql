-- Who holds each license, SCD2 (class assignments): one row per holding, ended by a reassignment,
-- an offboarding or an idle reclamation. At most one holding per license holds on any day.
select
    md5(license_id || '|' || source_seq) as assignment_key,
    license_id,
    user_id,
    product_id,
    ended_by,
    valid_from,
    valid_to,
    source_seq
from {{ ref('stg_assignments') }}
