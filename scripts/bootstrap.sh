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
  python3-setuptools python3-wheel  # fixture builds with the system Python (tests/integration/builds/test_deepep_build.py)
  git ca-certificates
  qemu-system-x86 qemu-utils debootstrap # tools/vmfleet: the realvm scenario's Debian guests (image, overlays, boot)
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

# CUDA 13 at /usr/local/cuda for the fixture builds of the unit tests (nvcc checks like NVSHMEM's, the
# include/cccl headers DeepEP needs under CUDA 13): NVIDIA's CUDA wheels, laid out as the toolkit, when missing.
cuda_prefix="${CUDA_PREFIX:-/usr/local/cuda-13.0}"
cuda_wheels=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-culibos==13.0.85 nvidia-cuda-cuxxfilt==13.0.85
             nvidia-cuda-cupti==13.0.85 nvidia-cuda-profiler-api==13.0.85 nvidia-nvtx==13.0.85)
if [[ ! -x "$cuda_prefix/bin/nvcc" || ! -f "$cuda_prefix/include/cccl/cuda/std/tuple" ]]; then
  if [[ $(id -u) -ne 0 && -z "${CUDA_PREFIX:-}" ]]; then
    echo "bootstrap: need root to install CUDA 13 into $cuda_prefix" >&2
    exit 1
  fi
  cuda_tmp="$(mktemp -d)"
  trap 'rm -rf "$cuda_tmp"' EXIT
  "$venv/bin/python" -m pip install -q --no-deps --only-binary=:all: --target "$cuda_tmp" "${cuda_wheels[@]}"
  mkdir -p "$cuda_prefix/dist-info"
  cp -a "$cuda_tmp/nvidia/cu13/." "$cuda_prefix/"
  cp -a "$cuda_tmp"/*.dist-info "$cuda_prefix/dist-info/"
  # The toolkit's own layout: lib64, targets/x86_64-linux, unversioned .so links.
  ln -sfn lib "$cuda_prefix/lib64"
  mkdir -p "$cuda_prefix/targets/x86_64-linux"
  ln -sfn ../../include "$cuda_prefix/targets/x86_64-linux/include"
  ln -sfn ../../lib "$cuda_prefix/targets/x86_64-linux/lib"
  for lib in "$cuda_prefix"/lib/lib*.so.[0-9]*; do
    [[ -e "${lib%%.so.*}.so" ]] || ln -s "$(basename "$lib")" "${lib%%.so.*}.so"
  done
  [[ -n "${CUDA_PREFIX:-}" ]] || ln -sfn "$(basename "$cuda_prefix")" /usr/local/cuda
  "$cuda_prefix/bin/nvcc" --version | tail -1
fi

# A real rdma-core libmlx5 for the unit test that reads its ELF version table (MLX5_1.x): Debian's
# ibverbs-providers, unpacked under .cache/rdma-core and never installed (installing it would put libibverbs into
# the host's dpkg state, which the simulated fleet's nodes share).
rdma_root="$here/.cache/rdma-core"
if [[ ! -f "$rdma_root/usr/lib/x86_64-linux-gnu/libmlx5.so.1" && "$(dpkg --print-architecture)" == amd64 ]]; then
  rdma_tmp="$(mktemp -d)"
  if (cd "$rdma_tmp" && timeout 300 apt-get download -qq ibverbs-providers >/dev/null 2>&1) ||
     { [[ $(id -u) -eq 0 ]] && timeout 300 apt-get update -qq && (cd "$rdma_tmp" && timeout 300 apt-get download -qq ibverbs-providers >/dev/null); }; then
    mkdir -p "$rdma_root.tmp" && dpkg-deb -x "$rdma_tmp"/ibverbs-providers_*.deb "$rdma_root.tmp"
    rm -rf "$rdma_root" && mv "$rdma_root.tmp" "$rdma_root"
  else
    echo "bootstrap: could not download ibverbs-providers (a unit test reads its libmlx5)" >&2
  fi
  rm -rf "$rdma_tmp"
fi

# The collection as Ansible finds it: .collections/ansible_collections/gpufleet/deepep -> the checkout.
mkdir -p "$here/.collections/ansible_collections/gpufleet"
ln -sfn ../../.. "$here/.collections/ansible_collections/gpufleet/deepep"
echo "bootstrap: ok ($venv)"
