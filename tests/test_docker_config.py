"""The cluster path of docker/ (issue 23, item 5), checked without a Docker engine or a cluster:

- each dagster.yaml loads through Dagster's own instance schema, and each configurable class in it (storage,
  QueuedRunCoordinator, DockerRunLauncher from dagster-docker) accepts its config and is built from it;
- `docker-compose config` (Debian's docker-compose) accepts compose.yaml (skipped, with the reason, without it);
- the Helm values parse as YAML and use only keys of the chart's schema (as read from dagster-io/dagster,
  helm/dagster/schema: the schema itself is not reachable here), with the run queue's limits of dagster.yaml;
- every image carries an exact tag, and every environment variable referenced is documented in docker/README.md;
- the Dockerfile has no `|| true` (a dbt project that does not parse fails the build) and ports are published
  on 127.0.0.1 by default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DAGSTER_YAMLS = [DOCKER / "dagster.yaml"]
HELM_VALUES = DOCKER / "helm" / "values.yaml"
# An exact version: digits with at least one dot (`0.8.0-pg16`, `7.0.14`, `3.11.7-slim-bookworm`), never `latest`,
# a bare major (`mongo:7`) or a flavour alone (`pg16`).
EXACT_TAG = re.compile(r"^v?\d+\.\d+(\.\d+)?([-.][A-Za-z0-9.-]+)?$")
# The keys the chart accepts (helm/dagster/schema/schema/charts/... of dagster-io/dagster, read for chart 1.13).
CHART_KEYS: dict[str, set[str]] = {
    "": {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
         "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
         "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
         "telemetry", "serviceAccount", "global", "retention", "additionalInstanceConfig"},
    "dagsterWebserver": {"replicaCount", "image", "nameOverride", "pathPrefix", "service", "workspace", "env",
                         "envConfigMaps", "envSecrets", "deploymentLabels", "labels", "nodeSelector", "affinity",
                         "tolerations", "podSecurityContext", "securityContext", "resources", "readinessProbe",
                         "livenessProbe", "startupProbe", "annotations", "enableReadOnly", "dbStatementTimeout",
                         "dbPoolRecycle", "logLevel", "schedulerName", "volumeMounts", "volumes"},
    "dagster-user-deployments": {"enabled", "enableSubchart", "imagePullSecrets", "deployments"},
    "deployment": {"name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "port",
                   "env", "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
                   "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
                   "startupProbe", "labels", "volumeMounts", "volumes", "schedulerName"},
    "runLauncher": {"type", "config"},
    "k8sRunLauncher": {"image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile",
                       "envConfigMaps", "envSecrets", "envVars", "volumeMounts", "volumes", "labels",
                       "failPodOnRunFailure", "resources", "schedulerName", "securityContext", "runK8sConfig"},
    "dagsterDaemon": {"enabled", "image", "runCoordinator", "heartbeatTolerance", "env", "envConfigMaps",
                      "envSecrets", "deploymentLabels", "labels", "nodeSelector", "affinity", "tolerations",
                      "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
                      "startupProbe", "annotations", "runMonitoring", "runRetries", "sensors", "schedules",
                      "schedulerName", "volumeMounts", "volumes"},
    "runCoordinator": {"enabled", "type", "config"},
    "queuedRunCoordinator": {"maxConcurrentRuns", "tagConcurrencyLimits", "dequeueIntervalSeconds",
                             "dequeueNumWorkers", "dequeueUseThreads"},
    "postgresql": {"image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
                   "postgresqlDatabase", "postgresqlParams", "postgresqlScheme", "service"},
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _env_placeholders(text: str) -> set[str]:
    """`${NAME}`, `${NAME:-default}`, `${NAME:?message}` in a compose file."""
    return set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))


# --- dagster.yaml ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DAGSTER_YAMLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_dagster_yaml_loads_through_dagsters_schema(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import ConfigurableClassData, class_from_code_pointer

    for name in _dagster_yaml_env(path):
        monkeypatch.setenv(name, f"value-of-{name.lower()}")
    config, custom = dagster_instance_config(str(path.parent), path.name)
    assert custom is None
    assert set(config) >= {"storage", "run_coordinator", "run_launcher"}
    built = {}
    for section in ("run_coordinator", "run_launcher"):
        data = config[section]
        klass = class_from_code_pointer(data["module"], data["class"])
        inst = ConfigurableClassData(data["module"], data["class"], yaml.safe_dump(data.get("config") or {}))
        built[section] = inst.rehydrate(klass)  # processes the config against the class's own config_type
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_docker import DockerRunLauncher
    from dagster_postgres import DagsterPostgresStorage

    coordinator, launcher = built["run_coordinator"], built["run_launcher"]
    assert isinstance(coordinator, QueuedRunCoordinator) and isinstance(launcher, DockerRunLauncher)
    assert coordinator.get_run_queue_config().max_concurrent_runs == 4
    assert launcher.networks == ["churnbench"]
    assert "churnbench-state:/var/lib/churnbench" in launcher.container_kwargs["volumes"]
    from dagster._config import process_config

    storage = process_config(DagsterPostgresStorage.config_type(), config["storage"]["postgres"])
    assert storage.success, storage.errors


def _dagster_yaml_env(path: Path) -> set[str]:
    """Names a dagster.yaml reads with `{env: NAME}` and passes to run containers (`env_vars`)."""
    text = path.read_text()
    return set(re.findall(r"\{env:\s*([A-Z_][A-Z0-9_]*)\}", text)) | set(
        (_yaml(path).get("run_launcher", {}).get("config", {}) or {}).get("env_vars", []))


def test_the_run_launcher_passes_every_variable_the_code_reads() -> None:
    """A run container gets what the code location has (compose's shared environment), or a run would start
    embedded services of its own inside the container."""
    compose = _yaml(DOCKER / "compose.yaml")
    shared = set(compose["x-churnbench-env"]) - {"DAGSTER_CURRENT_IMAGE"}
    passed = set(_yaml(DOCKER / "dagster.yaml")["run_launcher"]["config"]["env_vars"])
    assert passed == shared


# --- compose -------------------------------------------------------------------------------------------------


def test_docker_compose_accepts_the_compose_file() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install docker-compose)")
    env = {**os.environ, **_dotenv(DOCKER / ".env.example")}
    done = subprocess.run([exe, "-f", str(DOCKER / "compose.yaml"), "config", "-q"], env=env, cwd=DOCKER,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # A missing secret is refused, not started with an empty password.
    env.pop("CHURNBENCH_ARM_PASSWORD")
    refused = subprocess.run([exe, "-f", str(DOCKER / "compose.yaml"), "config", "-q"], env=env, cwd=DOCKER,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "CHURNBENCH_ARM_PASSWORD" in refused.stderr


def _dotenv(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {k: v for k, v in pairs}


def test_published_ports_are_on_loopback_by_default_and_the_arm_role_has_a_password() -> None:
    compose = _yaml(DOCKER / "compose.yaml")
    published = [p for s in compose["services"].values() for p in s.get("ports", [])]
    assert published and all(p.startswith("${CHURNBENCH_BIND_ADDRESS:-127.0.0.1}:") for p in published)
    assert compose["x-churnbench-env"]["CHURNBENCH_ARM_PASSWORD"].startswith("${CHURNBENCH_ARM_PASSWORD:?")
    keys = compose["services"]["saas"]["environment"]["CHURNBENCH_SAAS_API_KEYS"]
    assert '"per_tenant":true' in keys  # tenant-scoped keys, as in the embedded deployment


def test_the_dockerfile_fails_on_a_broken_build() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "|| true" not in text and "dbt parse" in text


# --- Helm ----------------------------------------------------------------------------------------------------


def test_helm_values_parse_and_use_the_charts_keys_only() -> None:
    values = _yaml(HELM_VALUES)
    assert set(values) <= CHART_KEYS[""]
    assert set(values["dagsterWebserver"]) <= CHART_KEYS["dagsterWebserver"]
    users = values["dagster-user-deployments"]
    assert set(users) <= CHART_KEYS["dagster-user-deployments"] and users["enabled"] is True
    for deployment in users["deployments"]:
        assert set(deployment) <= CHART_KEYS["deployment"]
    launcher = values["runLauncher"]
    assert set(launcher) <= CHART_KEYS["runLauncher"] and launcher["type"] == "K8sRunLauncher"
    assert set(launcher["config"]) == {"k8sRunLauncher"}
    assert set(launcher["config"]["k8sRunLauncher"]) <= CHART_KEYS["k8sRunLauncher"]
    daemon = values["dagsterDaemon"]
    assert set(daemon) <= CHART_KEYS["dagsterDaemon"]
    coordinator = daemon["runCoordinator"]
    assert set(coordinator) <= CHART_KEYS["runCoordinator"] and coordinator["type"] == "QueuedRunCoordinator"
    assert set(coordinator["config"]["queuedRunCoordinator"]) <= CHART_KEYS["queuedRunCoordinator"]
    assert set(values["postgresql"]) <= CHART_KEYS["postgresql"] and values["postgresql"]["enabled"] is False


def test_helm_and_compose_queue_runs_with_the_same_limits() -> None:
    helm = _yaml(HELM_VALUES)["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    compose = _yaml(DOCKER / "dagster.yaml")["run_coordinator"]["config"]
    assert helm["maxConcurrentRuns"] == compose["max_concurrent_runs"]
    assert helm["tagConcurrencyLimits"] == compose["tag_concurrency_limits"]


def test_helm_mounts_the_shared_state_in_the_code_location_and_every_run_pod() -> None:
    values = _yaml(HELM_VALUES)
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    for pod in (launcher, deployment):
        (volume,) = pod["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == "churnbench-state"
        assert pod["volumeMounts"] == [{"name": volume["name"], "mountPath": "/var/lib/churnbench"}]
    claim = _yaml(DOCKER / "helm" / "state-pvc.yaml")
    assert claim["metadata"]["name"] == "churnbench-state" and claim["spec"]["accessModes"] == ["ReadWriteMany"]


# --- images and environment ------------------------------------------------------------------------------------


def _images() -> list[str]:
    compose = _yaml(DOCKER / "compose.yaml")
    found = [s["image"] for s in compose["services"].values() if "image" in s]
    found += re.findall(r"^FROM\s+(\S+)", (DOCKER / "Dockerfile").read_text(), flags=re.M)
    found += [compose["x-churnbench-env"]["DAGSTER_CURRENT_IMAGE"]]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            image = node.get("image")
            if isinstance(image, dict) and "repository" in image:
                found.append(f"{image['repository']}:{image.get('tag', '')}")
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)
    walk(_yaml(HELM_VALUES))
    return found


def test_every_image_carries_an_exact_tag() -> None:
    images = _images()
    assert len(images) >= 8
    inexact = [i for i in images if not EXACT_TAG.match(i.rsplit(":", 1)[-1]) or ":" not in i]
    assert inexact == []
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    ours = {i for i in images if i.rsplit(":", 1)[0].endswith("churnbench")}
    assert ours and {i.rsplit(":", 1)[1] for i in ours} == {version}  # our image is tagged with our version


def _referenced_env() -> set[str]:
    compose_text = (DOCKER / "compose.yaml").read_text()
    compose = yaml.safe_load(compose_text)
    names = _env_placeholders(compose_text) | set(compose["x-churnbench-env"])
    for service in compose["services"].values():
        env = service.get("environment") or {}
        names |= set(env) if isinstance(env, dict) else set()
    names |= _dagster_yaml_env(DOCKER / "dagster.yaml")
    dockerfile = (DOCKER / "Dockerfile").read_text()
    names |= set(re.findall(r"^ARG\s+([A-Z_][A-Z0-9_]*)", dockerfile, flags=re.M))
    names |= {n for line in re.findall(r"^ENV\s+(.+)$", dockerfile, flags=re.M)
              for n in re.findall(r"([A-Z_][A-Z0-9_]*)=", line)}
    names |= set(_dotenv(DOCKER / ".env.example")) | set(_dotenv(DOCKER / "helm" / "secrets.env.example"))
    helm = _yaml(HELM_VALUES)
    names |= {v.split("=", 1)[0] for v in helm["runLauncher"]["config"]["k8sRunLauncher"].get("envVars", [])}
    for deployment in helm["dagster-user-deployments"]["deployments"]:
        names |= set(deployment.get("env") or {})
    return names


def test_every_environment_variable_referenced_is_documented() -> None:
    documented = set(re.findall(r"`([A-Z_][A-Z0-9_]*)`", (DOCKER / "README.md").read_text()))
    names = _referenced_env()
    assert len(names) > 20
    assert sorted(names - documented) == []


# --- the cell engine on Kubernetes -----------------------------------------------------------------------------


def test_helm_cell_engine_runs_the_compose_broker_and_workers_on_the_code_locations_image_and_state() -> None:
    """docker/helm/cell-engine.yaml: the broker of compose's image behind a password, a Service for it, and worker
    pods running `churnbench worker` from the code location's image and tag, with the churnbench secrets (the
    broker's URL among them) and the shared state volume mounted where values.yaml mounts it."""
    documents = {(d["kind"], d["metadata"]["name"]): d
                 for d in yaml.safe_load_all((DOCKER / "helm" / "cell-engine.yaml").read_text())}
    assert set(documents) == {("Deployment", "churnbench-broker"), ("Service", "churnbench-broker"),
                              ("Deployment", "churnbench-cell-worker")}
    compose = _yaml(DOCKER / "compose.yaml")["services"]
    (broker,) = documents[("Deployment", "churnbench-broker")]["spec"]["template"]["spec"]["containers"]
    assert broker["image"] == compose["broker"]["image"] and "--requirepass" in " ".join(broker["command"])
    assert broker["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "churnbench-broker", "key": "password"}
    assert documents[("Service", "churnbench-broker")]["spec"]["ports"][0]["port"] == 6379
    assert "@churnbench-broker:6379/" in _dotenv(DOCKER / "helm" / "secrets.env.example")["CHURNBENCH_BROKER_URL"]

    pod = documents[("Deployment", "churnbench-cell-worker")]["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    (code_location,) = _yaml(HELM_VALUES)["dagster-user-deployments"]["deployments"]
    assert worker["image"] == f"{code_location['image']['repository']}:{code_location['image']['tag']}"
    assert worker["command"] == compose["cell-worker"]["command"] == ["churnbench", "worker"]
    assert worker["envFrom"] == [{"secretRef": {"name": "churnbench-secrets"}}]
    assert {e["name"]: e["value"] for e in worker["env"]} == code_location["env"]
    assert worker["volumeMounts"] == code_location["volumeMounts"] and pod["volumes"] == code_location["volumes"]
