{#- An as-of view has at most one row per as_of_day and `column_name` (one version holds per day). -#}
{% test one_row_per_day(model, column_name) %}

select as_of_day, {{ column_name }}, count(*) as rows_that_day
from {{ model }}
group by as_of_day, {{ column_name }}
having count(*) > 1

{% endtest %}
