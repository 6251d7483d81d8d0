"""One scenario run from the CLI or a job: define it, build its missing inputs, materialize its `eval_run`
partition, return its summary. `churnbench run` and `paper`, the `build_scenario` job and every sweep cell go
through `run_scenario`."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from pathlib import Path
from typing import Any

from churn_assets.unique_keys import load_json


def run_scenario(session: Any, definitions: Any, world: str, arm: str, t_prime: dt.date, t: dt.date,
                 policy: str, saas_profile: str, echo: Any, *, llm: Any = None, replan: bool = False,
                 tags: dict[str, str] | None = None, retry_transport: bool = False,
                 repeats: int | None = None, fields: Any = None, checked: Any = None) -> dict[str, Any]:
    """Define the scenario, build its inputs, run `eval_run` for it, return its summary (plus where it is, and
    `reused`: whether a finished run of the same identity was reused). `llm`: the `LlmSettings` of an LLM agent
    (its agent id goes into the key, its settings into the experiment hash). `replan`: plan the scenario again
    (after a registry edit) instead of refusing its stored plan. `tags`: added to every run it launches.
    `retry_transport`: re-answer the transport failures of a finished result (`--retry-transport`; a finished
    result without any is reused as always). `repeats`: answer K repeats of the experiment (`--repeats`;
    None: what `tags` ask, a sweep cell's `REPEATS_TAG`, else 1); the summary is repeat 0's, with `repeats`
    (the experiment's figures over the K repeats, `evaluation/repeats.py`, without the per-task part).
    `fields`: how the caller names the request's parts in a refusal (`evaluation.requests.Fields`; the command
    line's by default). `checked`: the `Scenario` the caller's own request check returned for these same
    arguments on this state folder (the command line checks before it opens any service): not checked again."""
    from churn_assets.evaluation.answer_lines import answer_lines_to
    from churn_assets.evaluation.requests import CLI_FIELDS, Request
    from churn_assets.evaluation.verdicts import STALE_VERDICTS
    from churn_assets.orchestration.materialize import (
        REPEATS_TAG,
        RETRY_TRANSPORT_TAG,
        materialize,
        repeats_of,
        repeats_tags,
    )
    from churn_assets.orchestration.requests import check_run
    from churn_assets.orchestration.scenario_in_hand import ScenarioInHand
    from churn_assets.orchestration.scenario_materializer import materialize_scenario
    from churn_assets.orchestration.scenarios import StoredScenario, register_stored
    from churn_assets.orchestration.world_registry import using_world

    repeats = repeats_of(tags) if repeats is None else repeats
    # Checked before anything is registered (the one request check: a refusal leaves no scenario behind).
    scenario = checked if checked is not None else check_run(
        session.paths, Request(world, arm, policy, t_prime, t, llm.agent_id if llm else "", saas_profile,
                               llm.to_json() if llm else None), fields or CLI_FIELDS)
    # `worlds rm` refuses while the run builds and evaluates: the one use lock of the world for this evaluation,
    # handed to `eval_run` with the scenario's file as read here (`scenario_in_hand.py`), so neither is taken again.
    with using_world(session.paths, world) as in_use:
        read = register_stored(session.paths, session.instance, scenario)
        key = read.key
        # A finished result of this identity needs no input built or checked again (decision 190): a relaunched
        # sweep's cells each checked every input partition twice (here and in `eval_run`).
        reusable = not (replan or retry_transport) and _finished(session, read, repeats)
        if reusable:
            echo(f"scenario {scenario.label}: finished before with this identity"
                 + (f" ({repeats} repeats)" if repeats > 1 else "") + "; its inputs are not checked again")
            built = 0
        else:
            build = materialize_scenario(session, definitions, scenario, replan=replan, echo=echo, tags=tags)
            built, read = len(build.built), StoredScenario(scenario, build.plan)  # the plan stored (made) by now
        started = time.perf_counter()
        eval_tags = {**{k: v for k, v in (tags or {}).items() if k != REPEATS_TAG}, **repeats_tags(repeats),
                     **({RETRY_TRANSPORT_TAG: "true"} if retry_transport else {})}
        # an LLM agent's run shows a line per answer as it goes (n of N, verdict, seconds, ETA)
        with answer_lines_to(lambda line: echo(f"  {line}")) if llm is not None else contextlib.nullcontext():
            [result] = materialize(session, definitions, ["eval_run"], [key], tags=eval_tags or None,
                                   scenario=ScenarioInHand(read, in_use))
        seconds = time.perf_counter() - started
        # This run's own folder (experiment hash + code version), as the asset recorded it: never a folder of
        # an earlier code version under the same scenario key.
        folder = Path(str(result.metadata["eval_run"]["results"]))
        summary = load_json((folder / "summary.json").read_text(), str(folder / "summary.json"))
        timings = load_json((folder / "timings.json").read_text(), str(folder / "timings.json"))
        summary.update(results=str(folder), seconds=round(seconds, 1), inputs_built=built,
                       mean_latency_ms=timings.get("mean_latency_ms"), saas=timings.get("saas", {}),
                       resumed_tasks=timings.get("resumed_tasks", 0),
                       reused=bool(result.metadata["eval_run"].get("reused")),
                       repeats=result.metadata["eval_run"].get("experiment"))
        summary["stale_answers"] = sum(summary["verdicts"].get(v, 0) for v in STALE_VERDICTS)
        return summary


def _finished(session: Any, read: Any, repeats: int) -> bool:
    """Whether the scenario's stored plan (made with today's registry; `read`: its file as registering read it)
    has a finished result, every one of its `repeats` repeats. No stored plan, or one of another registry: False,
    and the materializer plans it or refuses it as always."""
    from churn_assets.evaluation.repeats import finished_repeats
    from churn_assets.evaluation.results import ResultsStore
    from churn_assets.evaluation.runner import finished_run
    from churn_assets.grounding.registry import load_registry
    from churn_assets.orchestration.scenario_inputs import drawn_settings
    from churn_assets.orchestration.world_registry import load_world_config

    scenario, plan = read.scenario, read.plan
    if plan is None or plan.registry_hash != load_registry().content_hash:
        return False
    config = load_world_config(session.paths, scenario.world_id)
    store = ResultsStore(session.paths.results_root)
    found = finished_run(store, scenario, config.config_hash, plan,
                         session.paths.task_set_file(scenario.world_id, scenario.t), drawn=drawn_settings())
    return found is not None and finished_repeats(store, found[0], repeats,
                                                  code=found[1]["code_version"]) is not None
