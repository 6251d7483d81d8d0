-- One row per day of the world's calendar (extended to the deployment calendar's end when that is later),
-- with calendar and fiscal attributes. The fiscal year starts in var('fiscal_year_start_month') and is
-- named after the calendar year it ends in (start month 2: FY2025 = 2024-02-01 .. 2025-01-31).
{%- set fiscal_start = var('fiscal_year_start_month') | int %}
{%- if fiscal_start < 1 or fiscal_start > 12 %}
  {{ exceptions.raise_compiler_error("var fiscal_year_start_month must be 1..12") }}
{%- endif %}

with world as (

    select
        calendar_start,
        calendar_end,
        greatest(calendar_end, dates_through) as last_day
    from {{ ref('stg_world') }}

),

days as (

    select
        cast(series.day_start as date) as date_day,
        world.calendar_start,
        world.calendar_end
    from world
    cross join generate_series(world.calendar_start, world.last_day, interval '1 day') as series (day_start)

),

shifted as (

    select
        *,
        cast(date_day - interval '{{ fiscal_start - 1 }} months' as date) as fiscal_shifted_day
    from days

)

select
    date_day,
    cast(extract(year from date_day) as integer) as calendar_year,
    cast(extract(quarter from date_day) as integer) as calendar_quarter,
    cast(extract(month from date_day) as integer) as month_of_year,
    cast(extract(day from date_day) as integer) as day_of_month,
    cast(extract(isodow from date_day) as integer) as day_of_week,
    trim(to_char(date_day, 'Day')) as day_name,
    cast(extract(week from date_day) as integer) as iso_week,
    cast(date_trunc('month', date_day) as date) as month_start,
    extract(isodow from date_day) in (6, 7) as is_weekend,
    cast(extract(year from fiscal_shifted_day) as integer) + {{ 1 if fiscal_start > 1 else 0 }} as fiscal_year,
    cast(extract(quarter from fiscal_shifted_day) as integer) as fiscal_quarter,
    'FY'
    || (cast(extract(year from fiscal_shifted_day) as integer) + {{ 1 if fiscal_start > 1 else 0 }})
    || '-Q'
    || cast(extract(quarter from fiscal_shifted_day) as integer) as fiscal_quarter_label,
    date_day - calendar_start as world_day_index,
    date_day between calendar_start and calendar_end as in_world_calendar
from shifted
