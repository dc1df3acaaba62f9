#!/usr/bin/env bash
# Deletes a Cloud TPU VM without prompting.
# Example: tpu_scripts/delete.sh --name rl --zone us-east5-a
set -euo pipefail
# shellcheck source=tpu_scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_flags "$@"
common_gcloud_flags
run gcloud compute tpus tpu-vm delete "$NAME" "${GCLOUD_FLAGS[@]}" --quiet
