{#- Validity intervals are day-granular and half-open: [valid_from, valid_to), valid_to NULL while open. -#}

{#- The row holds on `day`. -#}
{% macro holds_on(alias, day) -%}
    ({{ alias }}.valid_from <= {{ day }} and ({{ alias }}.valid_to is null or {{ day }} < {{ alias }}.valid_to))
{%- endmacro %}

{#- The row is known on `day` (it started on or before it; it may have ended since). -#}
{% macro known_by(alias, day) -%}
    ({{ alias }}.valid_from <= {{ day }})
{%- endmacro %}

{#- A date as seen on `day`: a date after `day` is not known yet, so it reads as NULL (still open). -#}
{% macro as_seen_on(column, day) -%}
    case when {{ column }} <= {{ day }} then {{ column }} end
{%- endmacro %}
