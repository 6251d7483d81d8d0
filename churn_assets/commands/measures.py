"""`churnbench measures`: the semantic model (the registry's measures) and which call answers each template."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--templates", is_flag=True, help="Each template with the measure call that answers it.")
@click.option("--markdown", is_flag=True, help="The generated table of docs/measures.md.")
@click.option("--json", "as_json", is_flag=True, help="Measures and template calls as one JSON object.")
def measures(templates: bool, markdown: bool, as_json: bool) -> None:
    """List the registered measures: arguments, unit, the classes each reads (with their tiers), meaning."""
    from churn_assets.grounding import semantic_tables as st
    from churn_assets.grounding.registry import load_registry

    registry = load_registry()
    if as_json:
        click.echo(json.dumps(st.as_json(registry), indent=1))
    elif markdown:
        click.echo(st.as_markdown(registry))
    else:
        click.echo(st.as_text(registry, templates=templates))
