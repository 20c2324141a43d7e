#!/usr/bin/env bash
# Run one stage of `make test` and record how long it took:
#   scripts/stage_timer.sh FILE NAME COMMAND...   runs COMMAND, prints and appends "NAME RC SECONDS" to FILE
#   scripts/stage_timer.sh FILE --summary         prints every recorded stage and their sum
set -uo pipefail
file=$1
shift
if [[ ${1:-} == --summary ]]; then
  [[ -f $file ]] || exit 0
  echo "== make test timings (seconds per stage):"
  awk '{ state = ($2 == 0) ? "passed" : "FAILED (rc " $2 ")"; printf "   %-12s %6d s  %s\n", $1, $3, state; sum += $3 }
       END { printf "   %-12s %6d s (%dm%02ds)\n", "sum", sum, sum / 60, sum % 60 }' "$file"
  exit 0
fi
name=$1
shift
start=$(date +%s)
echo "== stage $name: $*"
"$@"
rc=$?
secs=$(($(date +%s) - start))
echo "$name $rc $secs" >>"$file"
echo "== stage $name: $([[ $rc -eq 0 ]] && echo passed || echo "FAILED (rc $rc)") in ${secs} s"
exit "$rc"
