{#- Every validity interval is well formed: valid_to is open (NULL) or not before valid_from. -#}
{% test valid_interval(model) %}

select *
from {{ model }}
where valid_from is null or valid_to < valid_from

{% endtest %}
