"""A day typed on the command line (`--t`, `--t-prime`, `--at`): parsed before anything is opened, refused as a
usage error naming the option (one line, exit 2)."""

from __future__ import annotations

import datetime as dt

import click


def cli_day(value: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{option}: {value!r} is not a day YYYY-MM-DD") from None
