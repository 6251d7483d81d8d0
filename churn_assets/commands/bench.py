"""`churnbench bench`: the pipeline's benchmark, stage by stage, at one or more world scales (`benchmark/`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from churn_assets.unique_keys import load_json


def _scales(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from None
    if not values or any(v <= 0 for v in values):
        raise click.BadParameter(f"{text!r}: give positive multipliers, e.g. 1,10")
    return values


@click.command()
@click.option("--scale", "scale_text", default="1", show_default=True,
              help="Comma-separated multipliers of the world's daily rates (day-0 sizes unchanged), e.g. 1,10.")
@click.option("--stages", "stages_text", default=None,
              help="Comma-separated stages (default: all): generate, verify, fold, exposure, exposure_window, "
                   "paper_cold, paper_cold_serial, paper_warm, truth_raw, dbt, staged, vector_index, rag_corpus, "
                   "operational, documents, eval.")
@click.option("--repeats", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Repeats per stage at x1 (the median is reported); one at x10 and above (where the serial "
                   "cold paper is not run), one for paper stages.")
@click.option("--days", type=click.IntRange(2, 180), default=180, show_default=True,
              help="World length (the paper stages need the paper's T, 2024-04-27: 180 days).")
@click.option("--workers", type=click.IntRange(1, 8), default=None,
              help="Workers of the cold and warm paper (default: the paper's own default).")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the bench's ledgers and state folders (default: a temporary one, removed).")
@click.option("--keep", is_flag=True, help="Keep the state folders and ledgers (with --dir).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the results as JSON here.")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Measure nothing: render the table of an earlier --json file.")
@click.option("--markdown", is_flag=True, help="Print the table as Markdown (the README's form).")
@click.option("--readme", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Replace the bench block of this README with the table.")
def bench(scale_text: str, stages_text: str | None, repeats: int, days: int, workers: int | None,
          folder: Path | None, keep: bool, json_path: Path | None, from_json: Path | None, markdown: bool,
          readme: Path | None) -> None:
    """Measure the pipeline stage by stage (medians over repeats, peak resident memory per stage, load average),
    print a table, write JSON, regenerate the README's benchmark table. Each stage runs in its own process."""
    from churn_assets.benchmark.runner import parse_stages, render_markdown, render_text, run_bench, update_readme

    if from_json is not None:
        doc = load_json(from_json.read_text(), str(from_json))
    else:
        stages = parse_stages(stages_text)
        if folder is None:
            with tempfile.TemporaryDirectory(prefix="churnbench-bench-") as tmp:
                doc = run_bench(Path(tmp), _scales(scale_text), stages, repeats, days=days, paper_workers=workers,
                                say=lambda line: click.echo(line, err=True), json_path=json_path)
        else:
            doc = run_bench(folder, _scales(scale_text), stages, repeats, days=days, paper_workers=workers,
                            say=lambda line: click.echo(line, err=True), keep=keep, json_path=json_path)
    click.echo(render_markdown(doc) if markdown else render_text(doc))
    if readme is not None:
        update_readme(readme, doc)
        click.echo(f"{readme}: bench table replaced", err=True)
