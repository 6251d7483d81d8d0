"""`churnbench seals`: sign results folders to publish them (issue 46, `evaluation/signatures.py`), and rotate the
state folder's seal key.

- `seals keygen PRIVATE`: a new Ed25519 key pair, the private key PEM in `PRIVATE` (mode 0600), the public key in
  `PRIVATE.pub` (what a publisher hands to readers);
- `seals sign FOLDER... --key PRIVATE`: writes `signature.json` into each results folder.

A reader checks a signed folder with `churnbench verify-results FOLDER --public-key PRIVATE.pub`: the public key
alone, no state folder and no services. The state folder's own seal key (`seal-key`, `seal_key.py`) is a
different thing: a MAC key that never leaves the folder.

- `seals rotate`: a new seal key for the state folder; what verifies under the old one is sealed again under it,
  the rest named (`orchestration/key_rotation.py`).
"""

from __future__ import annotations

from pathlib import Path

import click

from churn_assets.errors import UserFacingError


@click.group()
def seals() -> None:
    """Sign results folders for publication (Ed25519; readers check them with `verify-results --public-key`), and
    rotate the state folder's seal key."""


@seals.command()
@click.argument("private_key", type=click.Path(dir_okay=False, path_type=Path))
def keygen(private_key: Path) -> None:
    """Write a new Ed25519 signing key to PRIVATE_KEY (0600) and its public key to PRIVATE_KEY.pub."""
    from churn_assets.evaluation.signatures import generate_keypair

    public = generate_keypair(private_key)
    click.echo(f"private key: {private_key} (mode 0600; keep it and back it up, never publish it)")
    click.echo(f"public key: {public} (publish it with the signed folders)")


@seals.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "private_key", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The Ed25519 private key (PEM) of `churnbench seals keygen`.")
def sign(folders: tuple[Path, ...], private_key: Path) -> None:
    """Sign each results FOLDER: writes signature.json into it (checked with `verify-results --public-key`)."""
    from churn_assets.evaluation.signatures import sign_folder

    for folder in folders:
        if not (folder / "summary.json").is_file():
            raise UserFacingError(f"{folder} is not a results folder (no summary.json)")
        click.echo(f"signed: {sign_folder(folder, private_key)}")


@seals.command()
def rotate() -> None:
    """Make a new seal key for the state folder and seal again under it every results seal, ledger meaning check
    and warehouse record that verifies under the current key (the rest is named and left: it stops verifying). The
    old key is then gone. Run it while nothing else runs here; cut short, run it again."""
    from churn_assets.orchestration.key_rotation import rotate_seal_key
    from churn_assets.orchestration.materialize import open_session
    from churn_assets.state import StatePaths

    with open_session(StatePaths.resolve()) as session:
        report = rotate_seal_key(session)
    for line in report.lines():
        click.echo(line)
