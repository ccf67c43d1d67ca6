#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine (run as root): system packages, bpffs, the
# virtual environment with an editable install, and the BPF objects. Each step checks first and
# does nothing when its result is already there, so `make demo` and `make test` can always call it.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
    libbpf1 libbpf-dev bpftool clang-16 llvm-16 make gcc libc6-dev
    iproute2 strace python3 python3-venv python3-pip python3-bpfcc linux-headers-amd64
    prometheus
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! mountpoint -q /sys/fs/bpf; then
    mount -t bpf bpf /sys/fs/bpf
fi

# Debian's python3 (not a pyenv or other interpreter on PATH) so that its python3-bpfcc is
# importable from the venv for the bcc comparisons.
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test,plot,arrow,pandas]'
    touch "$stamp"
fi

make -s -C progs
