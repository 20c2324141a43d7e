#!/usr/bin/env bash
# galaxy-importer, what Galaxy runs on an uploaded collection, over a tarball freshly built from this checkout.
# It runs in its own pinned virtualenv (<venv>-importer) so its pins never move the test tools' versions.
# ansible-test and the importer's own ansible-lint are off: the sanity stage runs ansible-test, and the lint stage
# runs the same ansible-lint with the stricter production profile (inside the importer it has a fixed 180 s
# limit that a loaded 2-core machine can miss). What runs: the tarball's structure, galaxy.yml, meta/runtime.yml,
# the docs of every plugin (ansible-doc), roles, changelog and README. Fails on any ERROR or WARNING line of
# the importer, or when it cannot import the collection.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$here/.venv}"
ivenv="${venv}-importer"
pins=(galaxy-importer==0.4.44 ansible-core==2.19.14 ansible-lint==26.10.1)
stamp="$ivenv/.pins-$(printf '%s ' "${pins[@]}" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  [[ -x "$ivenv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$ivenv"
  "$ivenv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
  rm -f "$ivenv"/.pins-*
  touch "$stamp"
fi

out="$(mktemp -d /tmp/gpufleet-importer.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$venv/bin/ansible-galaxy" collection build "$here" --output-path "$out" >/dev/null
tarball="$(ls "$out"/*.tar.gz)"
log="$out/importer.log"
set +e
GALAXY_IMPORTER_RUN_ANSIBLE_TEST=false GALAXY_IMPORTER_RUN_ANSIBLE_LINT=false \
  GALAXY_IMPORTER_TMP_ROOT_DIR="$out" PATH="$ivenv/bin:$PATH" \
  timeout 900 bash -c 'cd "$1" && exec "$2" -m galaxy_importer.main "$3"' importer "$out" "$ivenv/bin/python" "$tarball" \
  >"$log" 2>&1   # in $out: the importer writes importer_result.json into its working directory
rc=$?
set -e
grep -E '^(ERROR|WARNING)' "$log" || true
if ((rc != 0)) || grep -qE '^(ERROR|WARNING)' "$log"; then
  tail -40 "$log"
  echo "galaxy-importer: $(basename "$tarball") was not imported cleanly (rc $rc)" >&2
  exit 1
fi
echo "galaxy-importer: $(basename "$tarball") imports cleanly ($(grep -c '' "$log") log lines)"
