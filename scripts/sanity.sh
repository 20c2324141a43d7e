#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection placed under ansible_collections/gpufleet/deepep,
# as ansible-test requires. Extra arguments go to ansible-test (e.g. --test pep8, or a path).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$here/.venv/bin:$PATH"
# ansible-test fetches pip's get-pip.py from a host outside the reachable registries: give it the offline stand-in.
pip_version="$(python - <<'PY'
import re, ansible_test, pathlib
src = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)"
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if ! cmp -s "$here/scripts/get_pip_offline.py" "$cache"; then
  mkdir -p "$(dirname "$cache")"
  cp "$here/scripts/get_pip_offline.py" "$cache"
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-sanity.XXXXXX")"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpufleet/deepep"
mkdir -p "$dest"
cd "$here"
git ls-files -z --cached --others --exclude-standard | rsync -a --ignore-missing-args --from0 --files-from=- ./ "$dest/"
cd "$dest"
git init -q && git add -A
ansible-test sanity --venv --python 3.11 --color no "$@"
