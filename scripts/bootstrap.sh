#!/usr/bin/env bash
# Install everything `make test` and `make demo` need on a fresh Debian/Ubuntu machine (run as root):
# the apt packages the simulated fleet and the fixture builds use, and a pinned virtualenv of the
# controller-side tools. Safe to rerun: it only installs what is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$here/.venv}"
python="${PYTHON:-python3}"

apt_packages=(
  openssh-server openssh-client   # one sshd per simulated node, ssh for Ansible
  iproute2 util-linux procps psmisc # ip netns, unshare, nsenter, pkill
  rsync                           # ansible.posix-free copies in tests and sanity staging
  dpkg-dev                        # dpkg-scanpackages for the simulated fleet's apt mirror
  build-essential cmake ninja-build # fixture NVSHMEM/GDRCopy/DeepEP builds
  python3 python3-venv python3-pip python3-dev # the nodes' own Python (/usr/bin/python3)
  git ca-certificates
)

missing=()
for p in "${apt_packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp="$venv/.bootstrap-$(sha256sum "$here/requirements-dev.txt" | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q -r "$here/requirements-dev.txt"
  rm -f "$venv"/.bootstrap-*
  touch "$stamp"
fi

# The collection as Ansible finds it: .collections/ansible_collections/gpufleet/deepep -> the checkout.
mkdir -p "$here/.collections/ansible_collections/gpufleet"
ln -sfn ../../.. "$here/.collections/ansible_collections/gpufleet/deepep"
echo "bootstrap: ok ($venv)"
