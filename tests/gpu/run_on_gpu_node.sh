#!/usr/bin/env bash
# Run the GPU suite on a GPU node that has no access to a package index.
#
#   tests/gpu/run_on_gpu_node.sh WHEEL_DIR RESULTS_DIR [pytest args...]
#
# WHEEL_DIR holds ansible-core, its pure dependencies and jmespath (the audit rules' controller library) as wheels
# for the node's Python (installed into a private target directory, never into the node's environment); the interpreter that runs this script is the one with the
# CUDA build of torch (e.g. /opt/torch/.venv/bin/python3 on PATH as python3). DeepEP source trees are given to pytest
# as --deepep-v1-src / --deepep-v2-src.
set -euo pipefail
wheels="$(cd "$1" && pwd)"; shift
results="$1"; shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
site="$(mktemp -d /tmp/gpufleet-ansible.XXXXXX)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
for lib in ansible jmespath; do
  python3 -c "import $lib" 2>/dev/null || { echo "run_on_gpu_node.sh: no $lib wheel in $wheels (the controller needs it)" >&2; exit 2; }
done
mkdir -p "$here/.collections/ansible_collections/gpufleet"
ln -sfn ../../.. "$here/.collections/ansible_collections/gpufleet/deepep"
export ANSIBLE_COLLECTIONS_PATH="$here/.collections" ANSIBLE_CONFIG="$here/ansible.cfg" ANSIBLE_LOCAL_TEMP="$site/tmp"
mkdir -p "$results"
cd "$here"
python3 -m pytest -m gpu tests/gpu --gpu-results "$results" --gpu-python "$(command -v python3)" "$@"
