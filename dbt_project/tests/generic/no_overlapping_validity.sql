{#- No two versions of one entity hold on the same day: the half-open intervals [valid_from, valid_to)
    of one `entity_column` never overlap (a zero-length version holds on no day and overlaps nothing).
    `key_column` is the version's unique key. -#}
{% test no_overlapping_validity(model, entity_column, key_column) %}

select
    a.{{ entity_column }},
    a.valid_from as first_valid_from,
    a.valid_to as first_valid_to,
    b.valid_from as second_valid_from,
    b.valid_to as second_valid_to
from {{ model }} as a
inner join {{ model }} as b
    on b.{{ entity_column }} = a.{{ entity_column }}
    and b.{{ key_column }} > a.{{ key_column }}
where a.valid_from < coalesce(b.valid_to, 'infinity'::date)
  and b.valid_from < coalesce(a.valid_to, 'infinity'::date)

{% endtest %}
