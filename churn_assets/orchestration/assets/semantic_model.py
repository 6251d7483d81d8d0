"""The `semantic_model` asset: the registry's measures and the call that answers each template, shown in the UI.

Unpartitioned and built from the registry file alone (no store is read): materializing it records the same
tables `churnbench measures` prints and docs/measures.md holds, with the registry hash, so a re-tiered or
edited registry shows here as a new materialization. Its blocking check names any template whose measure is
unregistered, unimplemented or takes other arguments than the question's placeholders.
"""

# No `from __future__ import annotations`: Dagster reads the context annotations at decoration time.
import dagster as dg

from churn_assets.grounding.measures.context import IMPLEMENTATIONS
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.semantic_tables import as_markdown, measure_rows, template_rows
from churn_assets.tasks.templates import TEMPLATES


@dg.asset(
    group_name="grounding",
    kinds={"python", "yaml"},
    description="The grounding layer's semantic model: every registered measure (arguments, unit, the classes it "
                "reads and their tiers, meaning) and the measure call that answers each of the 47 templates, from "
                "churn_assets/grounding/registry.yaml (docs/measures.md).",
)
def semantic_model(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    registry = load_registry()
    measures = [dg.TableRecord({"measure": r["measure"], "arguments": ", ".join(r["args"]) or "-", "unit": r["unit"],
                                "reads (tier)": ", ".join(r["reads"]), "meaning": r["meaning"]})
                for r in measure_rows(registry)]
    calls = [dg.TableRecord(r) for r in template_rows()]
    return dg.MaterializeResult(metadata={
        "registry_hash": registry.content_hash,
        "measures": len(registry.measures),
        "templates": len(calls),
        # Tables the UI renders inline (sortable); the Markdown is the same text as docs/measures.md.
        "template_calls": dg.MetadataValue.table(calls, schema=_schema("template", "call")),
        "measure_table": dg.MetadataValue.table(measures, schema=_schema("measure", "arguments", "unit",
                                                                         "reads (tier)", "meaning")),
        "tables": dg.MetadataValue.md(as_markdown(registry)),
    })


def _schema(*columns: str) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name, "string") for name in columns])


def unanswered_templates() -> list[str]:
    """Templates whose measure is not registered, has no implementation, or takes other arguments."""
    registry = load_registry()
    problems = []
    for t in TEMPLATES:
        decl = registry.measures.get(t.measure)
        if decl is None:
            problems.append(f"{t.template_id}: measure {t.measure} is not registered")
        elif t.measure not in IMPLEMENTATIONS:
            problems.append(f"{t.template_id}: measure {t.measure} has no implementation")
        elif set(decl.args) != set(t.params):
            problems.append(f"{t.template_id}: {t.measure} takes ({', '.join(decl.args)}), the question has "
                            f"({', '.join(t.params)})")
    return problems


@dg.asset_check(asset=semantic_model, blocking=True)
def every_template_answered() -> dg.AssetCheckResult:
    problems = unanswered_templates()
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": len(problems),
                                                              "first": problems[0] if problems else ""})
