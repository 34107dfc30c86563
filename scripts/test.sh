#!/usr/bin/env bash
# The test command: set up (venv, build), run the test suite, type-check the package
# (strict mypy against the extension's stubs), build the docs strictly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${MTP_LLM_VENV:-.venv}"
"$VENV/bin/python" -m pytest "$@"
"$VENV/bin/python" -m mypy
# Not --quiet: mkdocs ignores warnings in strict mode when they are not logged.
"$VENV/bin/python" -m mkdocs build --strict --site-dir build/site
echo "docs: built with --strict"
