{#- An as-of view never shows a date after its as_of_day (docs/rules.md, "As-of reads"): every date column
    is checked, on every `every_n_days`-th day of the calendar and on its last day. -#}
{% test no_dates_after_as_of_day(model, every_n_days=1) %}

    {%- set date_columns = [] -%}
    {%- if execute -%}
        {%- for column in adapter.get_columns_in_relation(model) -%}
            {%- if column.dtype | lower == 'date' and column.name != 'as_of_day' -%}
                {%- do date_columns.append(column.name) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif %}

with days as (

    select date_day
    from {{ ref('dim_date') }}
    where world_day_index % {{ every_n_days }} = 0
       or date_day = (select max(date_day) from {{ ref('dim_date') }})

)

select v.*
from {{ model }} as v
inner join days on days.date_day = v.as_of_day
where false
    {%- for column in date_columns %}
    or v.{{ column }} > v.as_of_day
    {%- endfor %}

{% endtest %}
