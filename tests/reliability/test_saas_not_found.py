"""A SaaS 404 is an empty answer only when the product is missing (issue 22, item 4): the real SaaS API of the
session's state folder, reading the small world's truth schema, through the SaaS reader and its real client.

An unknown tenant used to be read as "no usage" (the reader caught every `SaasNotFound`), so a wrong world
was scored as reasoning errors; now it raises and the run fails with one line naming the tenant."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from churn_assets.fabric.postgres import connection
from churn_assets.fabric.saas_client import SaasClient, SaasNotFound
from churn_assets.fabric.sources import Sources
from churn_assets.fabric.truth import load_truth
from churn_assets.grounding.readers import saas as saas_reader
from churn_assets.grounding.routes import Route
from churn_assets.grounding.rows import Request
from churn_assets.services import ServiceUrls, saas_api_key
from churn_assets.state import StatePaths
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

DAY = dt.date(2024, 1, 20)
ROUTE = Route("live", "saas", "/products/{product}/utilization", DAY)


@pytest.fixture(scope="module")
def client(services: ServiceUrls, small_world: str, state_paths: StatePaths) -> Iterator[SaasClient]:
    assert services.saas is not None, "the session's services start the embedded SaaS API"
    with connection(services.warehouse) as conn:  # the SaaS vendor's database
        load_truth(conn, small_world, load_ledger(state_paths.ledger_dir(small_world)))
    with SaasClient(services.saas, saas_api_key(state_paths, world_id=small_world), max_retries=0) as opened:
        yield opened


def read(client: SaasClient, world: str, products: tuple[str, ...]) -> Any:
    ctx = SimpleNamespace(world_id=world, sources=Sources(world, saas=client), cache={})
    return saas_reader.read(ctx, Request("usage", window_days=7, products=products), ROUTE)


def test_an_unknown_product_is_no_usage_but_an_unknown_tenant_is_an_error(client: SaasClient, small_world: str,
                                                                         services: ServiceUrls,
                                                                         state_paths: StatePaths) -> None:
    known = client.prices(small_world, as_of=DAY.isoformat())[0]["product_id"]
    found = read(client, small_world, (known, "prd_9999"))
    assert found.rows and {r.product_id for r in found.rows} == {known}  # prd_9999: no usage, no error

    tenant = "nope-s1-abcdef"
    assert services.saas is not None
    # A key issued for that tenant (with small_world's key the server answers 403 before any lookup: keys are
    # scoped to tenants), so the server looks the tenant up and finds none.
    with SaasClient(services.saas, saas_api_key(state_paths, world_id=tenant), max_retries=0) as theirs, \
            pytest.raises(SaasNotFound, match=f"no tenant {tenant}") as raised:
        read(theirs, tenant, (known,))
    assert raised.value.missing == "tenant"


def test_a_404_without_a_missing_field_is_an_error(services: ServiceUrls, state_paths: StatePaths,
                                                   small_world: str) -> None:
    # a wrong base URL: the server's own 404 for a path it does not serve says nothing is missing
    assert services.saas is not None
    key = saas_api_key(state_paths, world_id=small_world)
    with SaasClient(services.saas + "/wrong-prefix", key, max_retries=0) as wrong, \
            pytest.raises(SaasNotFound) as raised:
        read(wrong, small_world, ("prd_0001",))
    assert raised.value.missing is None
