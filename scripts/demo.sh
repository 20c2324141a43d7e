#!/usr/bin/env bash
# `make demo`: converge, verify and audit a simulated fleet, printing what an operator sees.
#
# The first run brings up DEMO_NODES simulated gcp_b200 nodes (group b200_cluster) and converges them. A later
# run reuses the fleet when it is still up with the same nodes: site.yml then finds every node intact and
# changes nothing, in seconds. Each run then verifies DeepEP on the nodes (playbooks/verify.yml) and audits the
# fleet (playbooks/audit.yml); the reports land in gpufleet-reports/ of the checkout.
#   DEMO_NODES=4 (default), DEMO_PROFILE=gcp_b200, DEMO_GROUP=b200_cluster; `make demo-down` stops the fleet.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
venv="${VENV:-$here/.venv}"
nodes="${DEMO_NODES:-4}"
profile="${DEMO_PROFILE:-gcp_b200}"
group="${DEMO_GROUP:-b200_cluster}"
fleetsim=("$venv/bin/python" -m tools.fleetsim)
inventory="$here/build/demo-inventory.yml"
reports="$here/gpufleet-reports"

if ! [[ "$nodes" =~ ^[1-9][0-9]?$ ]]; then
  echo "demo: DEMO_NODES=$nodes is not a node count (expected 1 to 99)" >&2
  exit 2
fi

stage() { printf '\n== %s\n' "$*"; }
seconds() { echo $(( $(date +%s) - $1 )); }

# Reuse the running fleet only when it is exactly the demo's: the same count of nodes, all up, of the
# profile and group asked for.
reuse="$("${fleetsim[@]}" status --json 2>/dev/null | "$venv/bin/python" -c '
import json, sys
want_n, profile, group = int(sys.argv[1]), sys.argv[2], sys.argv[3]
try:
    data = json.load(sys.stdin)["fleet"]
except (ValueError, KeyError, TypeError):
    print("no"); sys.exit(0)
nodes = data.get("nodes") or {}
ok = data.get("up") and len(nodes) == want_n and all(
    n.get("state") == "up" and n.get("profile") == profile and n.get("group") == group for n in nodes.values())
print("yes" if ok else "no")' "$nodes" "$profile" "$group" || echo no)"

t0=$(date +%s)
if [[ "$reuse" == yes ]]; then
  stage "Reusing the running demo fleet ($nodes $profile nodes, group $group)"
else
  stage "Bringing up $nodes simulated $profile nodes (group $group)"
  "${fleetsim[@]}" down --quiet
  "${fleetsim[@]}" up --profile "$profile" --nodes "$nodes" --group "$group"
fi
mkdir -p "$here/build"
"${fleetsim[@]}" inventory --output "$inventory"

run_play() {
  ansible-playbook -i "$inventory" -i "$here/inventories/fleetsim" -e "gpufleet_report_dir=$reports" "$@"
}

stage "Converge: playbooks/site.yml -l $group"
t=$(date +%s)
run_play playbooks/site.yml -l "$group"
converge_s=$(seconds "$t")

stage "Verify: playbooks/verify.yml (DeepEP's intranode and internode tests, bandwidth gates)"
t=$(date +%s)
run_play playbooks/verify.yml -e "gpufleet_verify_groups=$group"
verify_s=$(seconds "$t")

stage "Audit: playbooks/audit.yml (read-only)"
t=$(date +%s)
run_play playbooks/audit.yml -l "$group" -e audit_latest_link=true
audit_s=$(seconds "$t")

verify_md="$(ls -1d "$reports"/verify/*/summary.md 2>/dev/null | tail -1 || true)"
cat <<EOF

== Demo done in $(seconds "$t0") s (converge ${converge_s} s, verify ${verify_s} s, audit ${audit_s} s)
Reports:
  audit   $reports/audit/latest/fleet.html   (also fleet.md, fleet.json)
  verify  ${verify_md:-$reports/verify/<time>/summary.md}
Run \`make demo\` again: the fleet is reused and site.yml finds every node intact (changed=0).
Look at the fleet:
  ${fleetsim[*]} status
  ${fleetsim[*]} exec ${group//_/-}-1 -- cat /proc/driver/nvidia/params
  ansible -i build/demo-inventory.yml $group -m gpufleet.deepep.gpu_topology
Stop it: make demo-down
EOF
