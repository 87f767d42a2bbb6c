#!/usr/bin/env bash
# Prepare a machine for remediator: the Python virtualenv always, and with --system the Debian
# packages the test suite runs against (Prometheus, Alertmanager, Chromium, PostgreSQL server
# binaries, Slurm's slurmctld/slurmd/client and munge).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

want_system=0
[ "${1:-}" = "--system" ] && want_system=1

if [ "$want_system" = 1 ]; then
    missing=()
    command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
    command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } \
        || missing+=(postgresql)
    command -v kubectl >/dev/null 2>&1 || missing+=(kubectl)
    command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
    command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            echo "setup: installing system packages: ${missing[*]}"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        else
            echo "setup: missing system packages: ${missing[*]}" >&2
            echo "setup: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
            exit 1
        fi
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ scripts/cloud-requirements.txt -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
    # The machine's pip config names optional local indexes; their absence is noise, not news.
    .venv/bin/pip install -q --progress-bar off -e '.[dev]' 2>&1 \
        | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
    # Without their declared dependencies: see the file's header for the dateutil conflict.
    .venv/bin/pip install -q --progress-bar off --no-deps -r scripts/cloud-requirements.txt 2>&1 \
        | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
    touch "$stamp"
fi

if [ "$want_system" = 1 ]; then
    scripts/install-helm.sh  # the chart tests render with the real helm
fi
