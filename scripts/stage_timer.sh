#!/usr/bin/env bash
# Run one stage of `make test` and record how long it took and what it cost the machine:
#   scripts/stage_timer.sh FILE --begin           notes the machine's CPU counters at the start of the run
#   scripts/stage_timer.sh FILE NAME COMMAND...   runs COMMAND, prints and appends one line of figures to FILE:
#                                                 NAME RC WALL CPU BUSY TOTAL (CPU: user+sys seconds of the stage's
#                                                 own processes; BUSY and TOTAL: the machine's busy and all CPU
#                                                 ticks while it ran, every process: guests and nodes daemonized out
#                                                 of the stage count there)
#   scripts/stage_timer.sh FILE --summary         prints every recorded stage, their sum, and the whole run's figures
# The machine's figures are what bounds the wall time: on N cores a run that keeps them busy cannot end before its
# machine CPU seconds / N (the summary prints that floor beside the wall time).
set -uo pipefail
file=$1
shift
hz=$(getconf CLK_TCK)
cores=$(nproc)
# The machine's busy and total CPU ticks since boot (/proc/stat's first line: user nice system idle iowait irq
# softirq steal ...).
machine() { awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6; exit }' /proc/stat; }
if [[ ${1:-} == --begin ]]; then
  echo "#begin $(date +%s) $(machine)" >"$file"
  exit 0
fi
if [[ ${1:-} == --summary ]]; then
  [[ -f $file ]] || exit 0
  read -r now_busy now_total < <(machine)
  echo "== make test timings (wall seconds per stage; CPU: the stage's own user+sys seconds; machine: every process's"
  echo "   CPU seconds while the stage ran, and how busy that kept the $cores cores; stages of a group overlap):"
  awk -v now="$(date +%s)" -v nb="$now_busy" -v nt="$now_total" -v hz="$hz" -v cores="$cores" '
    $1 == "#begin" { start = $2; b0 = $3; t0 = $4; next }
    { state = ($2 == 0) ? "passed" : "FAILED (rc " $2 ")"
      busy = ($6 > 0) ? sprintf("%3d%%", 100 * $5 / $6) : "   -"
      printf "   %-22s %6d s  CPU %6d s  machine %6d s %s  %s\n", $1, $3, $4, $5 / hz, busy, state
      sum += $3; cpu += $4 }
    END { printf "   %-22s %6d s  CPU %6d s (%dm%02ds of wall)\n", "sum", sum, cpu, sum / 60, sum % 60
          if (start) {
            wall = now - start; used = (nb - b0) / hz
            printf "   run                    %6d s wall; the machine spent %d CPU s on %d cores (%d%% busy): at full use it could not end before %d s\n",
                   wall, used, cores, 100 * (nb - b0) / (nt - t0 > 0 ? nt - t0 : 1), used / cores } }' "$file"
  exit 0
fi
name=$1
shift
start=$(date +%s)
read -r busy0 total0 < <(machine)
echo "== stage $name: $*"
"$@"
rc=$?
secs=$(($(date +%s) - start))
read -r busy1 total1 < <(machine)
# This shell's children's user and sys seconds (bash `times`, second line: "XmS.SSSs XmS.SSSs").
# (`times` redirected, not piped: in a pipe it would report a subshell's children, none.)
times_file=$(mktemp)
times >"$times_file"
cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); n += p[1] * 60 + p[2] } printf "%d", n }' "$times_file")
rm -f "$times_file"
echo "$name $rc $secs $cpu $((busy1 - busy0)) $((total1 - total0))" >>"$file"
echo "== stage $name: $([[ $rc -eq 0 ]] && echo passed || echo "FAILED (rc $rc)") in ${secs} s (CPU ${cpu} s; the machine's CPU $(( (busy1 - busy0) / hz )) s)"
exit "$rc"
