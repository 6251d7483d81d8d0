"""`python -m saas_mock`: serve the SaaS API under uvicorn.

    python -m saas_mock --state-dir .churnbench --port 8765            # embedded (what `services up` runs)
    CHURNBENCH_SAAS_WAREHOUSE_URL=postgresql://... \\
    CHURNBENCH_SAAS_API_KEYS='{"keys": [{"id": "prod", "key": "...", "profile": "default"}]}' \\
        python -m saas_mock --host 0.0.0.0 --port 8000                # deployed elsewhere, same Postgres

The tenants' truth schemas are read from the first of: `CHURNBENCH_SAAS_WAREHOUSE_URL`,
`CHURNBENCH_POSTGRES_URL` (the external warehouse), the embedded Postgres of `--state-dir` (looked up again
on every reconnect). There is no `--warehouse-url` flag on purpose: a URL may hold a password, and command
lines are visible to other users. Keys: `CHURNBENCH_SAAS_API_KEYS`, else `--keys-file`, else the state
folder's `services/saas-keys.json` (see `saas_mock/config.py`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from churn_assets.errors import UserFacingError
from churn_assets.services import (
    POSTGRES,
    POSTGRES_URL_ENV,
    WAREHOUSE_DATABASE,
    libpq_url,
    saas_keys_file,
    with_database,
)
from churn_assets.state import StatePaths
from saas_mock.config import load_keys, with_overrides

WAREHOUSE_URL_ENV = "CHURNBENCH_SAAS_WAREHOUSE_URL"


def warehouse_url(state_dir: str | None) -> str:
    """The Postgres database holding the `<world>_truth` schemas (see the module doc for the order)."""
    if os.environ.get(WAREHOUSE_URL_ENV):
        return libpq_url(os.environ[WAREHOUSE_URL_ENV])
    if os.environ.get(POSTGRES_URL_ENV):
        return libpq_url(os.environ[POSTGRES_URL_ENV])
    if not state_dir:
        raise UserFacingError(f"no warehouse: set {WAREHOUSE_URL_ENV} or {POSTGRES_URL_ENV}, or give --state-dir")
    status = POSTGRES.status(StatePaths.resolve(state_dir), check_health=False)
    if status.url is None:
        raise UserFacingError(f"the embedded Postgres of state folder {state_dir} is {status.state} "
                              f"({status.detail}); start it with `churnbench services up`")
    return with_database(libpq_url(status.url), WAREHOUSE_DATABASE)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m saas_mock", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--state-dir", help="state folder: embedded Postgres and the keys file are found through it")
    p.add_argument("--keys-file", help="JSON keys file (default: <state>/services/saas-keys.json)")
    p.add_argument("--rate-per-minute", type=float, help="override every key's rate limit (0: no limit)")
    p.add_argument("--burst", type=int, help="override every key's burst")
    p.add_argument("--latency-ms", type=float, help="override every key's injected latency (0: none)")
    p.add_argument("--revalidate-s", type=float, default=5.0,
                   help="re-read a tenant's ledger head at most this often (seconds)")
    p.add_argument("--max-views", type=int, default=64, help="(world, day) projections kept in memory")
    p.add_argument("--log-level", default="warning")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        keys_file = args.keys_file or (str(saas_keys_file(StatePaths.resolve(args.state_dir)))
                                       if args.state_dir else None)
        keys = with_overrides(load_keys(keys_file), rate_per_minute=args.rate_per_minute, burst=args.burst,
                              latency_ms=args.latency_ms)
        warehouse_url(args.state_dir)  # fail at start, not at the first request, when there is none
    except UserFacingError as e:
        print(f"saas_mock: error: {e}", file=sys.stderr)
        return 2

    import uvicorn

    from saas_mock.app import create_app
    from saas_mock.projection import PostgresTruthSource, ProjectionCache

    source = PostgresTruthSource(lambda: warehouse_url(args.state_dir))
    cache = ProjectionCache(source, max_views=args.max_views, revalidate_s=args.revalidate_s)
    app = create_app(keys, cache)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plans = ", ".join(f"{k.key_id}={k.plan.profile}({k.plan.rate_per_minute:g}/min, {k.plan.latency_ms:g} ms, "
                      f"{k.scope})" for k in keys)
    unscoped = [k.key_id for k in keys if k.tenants is None and not k.per_tenant]
    if unscoped:
        print(f"saas_mock: warning: key(s) {', '.join(unscoped)} read every tenant (give them `tenants` or "
              "`per_tenant: true` to scope them)", file=sys.stderr, flush=True)
    print(f"saas_mock: serving http://{args.host}:{args.port} keys: {plans}", flush=True)
    # Access logs off: at hundreds of requests a second they cost more than the answers.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                loop="auto", http="auto", lifespan="off")  # uvloop + httptools when installed
    return 0


if __name__ == "__main__":
    sys.exit(main())
