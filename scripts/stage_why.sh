#!/usr/bin/env bash
# Why the failed stages of `make test` failed, printed after its timings (the end of a CI log is what is read first):
#   scripts/stage_why.sh STAGE_LOGS MOLECULE_LOGS STAGE...
# A Molecule stage: each failed scenario's <scenario>.why (scripts/molecule_run.py writes it: how the scenario ended
# and the lines of its log that say why). A pytest stage: its FAILED/ERROR lines. Any other stage: its log's last lines.
set -uo pipefail
stage_logs=$1
molecule_logs=$2
shift 2
for stage in "$@"; do
  echo "== why $stage failed:"
  case $stage in
    molecule | realvm)
      found=0
      for why in "$molecule_logs"/*.why; do
        [[ -f $why ]] || continue
        found=1
        sed 's/^/   /' "$why"
      done
      [[ $found == 1 ]] || echo "   (no scenario left a .why file under $molecule_logs)"
      ;;
    *)
      log=$stage_logs/$stage.log
      if [[ ! -f $log ]]; then
        echo "   (no log at $log)"
      elif grep -qE '^(FAILED|ERROR) ' "$log"; then
        grep -E '^(FAILED|ERROR) ' "$log" | tail -n 15 | cut -c1-700 | sed 's/^/   /'
      else
        tail -n 15 "$log" | cut -c1-700 | sed 's/^/   /'
      fi
      ;;
  esac
done
exit 0
