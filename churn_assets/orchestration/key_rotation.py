"""`churnbench seals rotate`: move every seal of a state folder to a new key (issue 46, item 1).

A seal key is rotated when it may have been read by someone who should not have it (a copy on a remote worker
that was retired, a backup that leaked). Rotating makes a new key, `<key file>.next` (0600), then seals again under
it only what verifies under the current key:

- each catalog row's results seals (`evaluation/seals.reseal`: the folder's files must still match the seal);
- each registered world's ledger meaning check (`world/ledger.reseal_meaning`: the record must verify);
- each registered world's warehouse content record (`fabric/warehouse_content.reseal_content`: the record must
  verify and the warehouse still match it).

What does not verify is named in the report and left under the old key: after the rotation it no longer verifies
("key changed"), which is what a seal that could not be vouched for should do; a forgery never gains a MAC under
the new key. Then the new key replaces the old one (one rename, `seal_key.promote_next_key`): the old key is gone.

Cut short, the same command finishes it: the `.next` key is kept, and what is already sealed under it is skipped.
Run it while nothing else runs in the state folder (a run sealing under the old key meanwhile would be left under
it). A worker on another host that holds a copy of the key (`CHURNBENCH_SEAL_KEY_FILE`, docs/deployment.md) needs
the new one copied the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from churn_assets.evaluation.catalog import RunCatalog
from churn_assets.evaluation.seals import reseal
from churn_assets.fabric.postgres import connection
from churn_assets.fabric.warehouse_content import reseal_content
from churn_assets.grounding.registry import load_registry
from churn_assets.grounding.routes import warehouse_views
from churn_assets.orchestration.materialize import Session
from churn_assets.orchestration.world_registry import registered_worlds
from churn_assets.seal_key import next_key, promote_next_key, seal_key
from churn_assets.world.ledger import MANIFEST_FILE, reseal_meaning


@dataclass
class RotationReport:
    """What one rotation sealed again under the new key, and what it left (with why)."""

    old_key_id: str
    new_key_id: str
    results_seals: int = 0
    ledgers: int = 0
    warehouses: int = 0
    left: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"seal key rotated: {self.old_key_id} -> {self.new_key_id}",
               f"  sealed again under the new key: {self.results_seals} results seal(s), {self.ledgers} ledger "
               f"meaning check(s), {self.warehouses} warehouse record(s)"]
        out += [f"  left under the old key (it no longer verifies): {why}" for why in self.left]
        return out


def rotate_seal_key(session: Session) -> RotationReport:
    """Seal again under a new key whatever verifies under the state folder's key, then make the new key current."""
    root = session.paths.root
    old, new = seal_key(root), next_key(root, create=True)
    assert new is not None
    report = RotationReport(old.key_id, new.key_id)
    catalog = RunCatalog(session.urls.warehouse, new)
    for row in catalog.runs():
        resealed, changed = dict(row.seal or {}), False
        for name, seal in sorted((row.seal or {}).items()):
            if seal.get("key_id") == new.key_id:
                continue  # a rotation cut short sealed it already
            folder = Path(row.results_dir).parent / name
            again, problems = reseal(folder, seal, old, new) if folder.is_dir() else (None, ["the folder is missing"])
            if again is None:
                report.left.append(f"catalog row {row.run_id}, {folder}: {'; '.join(problems)}")
                continue
            resealed[name], changed = again, True
            report.results_seals += 1
        if changed:
            catalog.set_seal(row.run_id, resealed)
    worlds = sorted(registered_worlds(session.instance))
    for world in worlds:
        ledger_dir = session.paths.ledger_dir(world)
        if not (ledger_dir / MANIFEST_FILE).exists():
            continue
        done, problem = reseal_meaning(ledger_dir, old, new)
        if problem:
            report.left.append(f"world {world}'s ledger: {problem}")
        report.ledgers += done
    views = warehouse_views(load_registry())
    with connection(session.urls.warehouse) as conn:
        for world in worlds:
            done, problem = reseal_content(conn, world, views, old, new)
            if problem:
                report.left.append(f"world {world}'s warehouse: {problem}")
            report.warehouses += done
    promote_next_key(root)
    return report
