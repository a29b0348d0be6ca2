#!/usr/bin/env bash
# Run experiments.main on N host-platform (CPU) devices: data-parallel over a ('data',) mesh.
# usage: bash launch/local_multidevice.sh N [experiments.main flags...]
set -euo pipefail
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 NUM_DEVICES [experiments.main flags...]" >&2
  exit 2
fi
n="$1"; shift
cd "$(dirname "$0")/.."
XLA_FLAGS="--xla_force_host_platform_device_count=${n} ${XLA_FLAGS:-}" JAX_PLATFORMS=cpu \
  exec python -m experiments.main "$@"
