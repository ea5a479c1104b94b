#!/usr/bin/env bash
# Run by `snakemake --sdm conda` after it creates the environment of envs/sinkscope.yaml:
# installs this checkout's sinkscope package (editable, without touching the locked dependencies).
set -euo pipefail
python -m pip install --no-deps -e "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
