#!/usr/bin/env bash
# Creates a Cloud TPU VM (single host or pod slice).
# Example: tpu_scripts/create.sh --name rl --zone us-east5-a --accelerator-type v6e-8
set -euo pipefail
# shellcheck source=tpu_scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_flags "$@"

[[ -n "$ACCELERATOR_TYPE" ]] || die "--accelerator-type is required (v5litepod-N, v5p-N, v6e-N)"
expected_version="$(runtime_for "$ACCELERATOR_TYPE")"
VERSION="${VERSION:-$expected_version}"
common_gcloud_flags
extra=()
if [[ "$SPOT" -eq 1 ]]; then
  extra+=(--spot)
fi
run gcloud compute tpus tpu-vm create "$NAME" "${GCLOUD_FLAGS[@]}" \
  --accelerator-type="$ACCELERATOR_TYPE" --version="$VERSION" "${extra[@]}"
