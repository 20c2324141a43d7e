#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection placed under ansible_collections/gpufleet/deepep,
# as ansible-test requires. Extra arguments go to ansible-test (e.g. --test pep8, or a path).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$here/.venv/bin:$PATH"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-sanity.XXXXXX")"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpufleet/deepep"
mkdir -p "$dest"
cd "$here"
git ls-files -z --cached --others --exclude-standard | rsync -a --from0 --files-from=- ./ "$dest/"
cd "$dest"
git init -q && git add -A
ansible-test sanity --venv --python 3.11 --color no "$@"
