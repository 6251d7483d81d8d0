-- Users, SCD2 over both of their changing attributes: status (class user_status) and cost center
-- (class cost_center_membership). A new version starts whenever either changes; exactly one version
-- holds on any day from the hire on. Zero-length intervals of the sources (two changes on one day)
-- hold on no day and make no version here; they stay in stg_users and fct_cost_center_membership.

with status as (

    select * from {{ ref('stg_users') }}
    where valid_to is null or valid_from < valid_to

),

membership as (

    select * from {{ ref('stg_cost_center_memberships') }}
    where valid_to is null or valid_from < valid_to

),

change_days as (

    select
        user_id,
        valid_from as change_day
    from status
    union
    select
        user_id,
        valid_from
    from membership
    union
    select
        user_id,
        valid_to
    from status
    where valid_to is not null
    union
    select
        user_id,
        valid_to
    from membership
    where valid_to is not null

),

spans as (

    select
        user_id,
        change_day as valid_from,
        lead(change_day) over (partition by user_id order by change_day) as valid_to
    from change_days

),

lifecycle as (

    select
        user_id,
        min(valid_from) as hired_on,
        min(case when user_status = 'offboarded' then valid_from end) as offboarded_on
    from {{ ref('stg_users') }}
    group by user_id

)

select
    md5(spans.user_id || '|' || spans.valid_from) as user_key,
    spans.user_id,
    status.user_status,
    coalesce(status.user_status = 'active', false) as is_active,
    membership.cost_center_id,
    lifecycle.hired_on,
    lifecycle.offboarded_on,
    spans.valid_from,
    spans.valid_to
from spans
left join status
    on status.user_id = spans.user_id and {{ holds_on('status', 'spans.valid_from') }}
left join membership
    on membership.user_id = spans.user_id and {{ holds_on('membership', 'spans.valid_from') }}
inner join lifecycle
    on lifecycle.user_id = spans.user_id
where status.user_id is not null or membership.user_id is not null
