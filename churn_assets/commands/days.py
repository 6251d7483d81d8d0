"""A day typed on the command line (`--t`, `--t-prime`, `--at`): parsed before anything is opened, refused as a
usage error naming the option (one line, exit 2)."""

from __future__ import annotations

import datetime as dt

import click

from churn_assets.world.calendar import typed_day


def cli_day(value: str, option: str) -> dt.date:
    try:
        return typed_day(value)
    except ValueError as e:
        raise click.BadParameter(f"{option}: {e}") from None
