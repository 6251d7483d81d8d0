{#- The world a build is for, and its schemas (must agree with churn_assets/fabric/postgres.py). -#}

{% macro world_prefix() -%}
    {%- set world = var('world') -%}
    {%- if not modules.re.match('^[a-z][a-z0-9_]{0,30}-s[0-9]+-[0-9a-f]{6}$', world) -%}
        {{ exceptions.raise_compiler_error(
            "var 'world' = '" ~ world ~ "' is not a world id (<name>-s<seed>-<hash6>)"
        ) }}
    {%- endif -%}
    {{ world | replace('-', '_') }}
{%- endmacro %}

{% macro world_schema(layer) -%}
    {{ world_prefix() }}_{{ layer }}
{%- endmacro %}

{#- Every model of a build goes to <world>_analytics, whatever its folder. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ world_schema('analytics') }}
{%- endmacro %}
