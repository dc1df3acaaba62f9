#!/usr/bin/env bash
# Copies the project to every worker of a TPU VM and installs it with jax[tpu].
# Example: tpu_scripts/setup.sh --name rl --zone us-east5-a
set -euo pipefail
# shellcheck source=tpu_scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_flags "$@"

REPO_DIR="${REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
[[ -d "$REPO_DIR" ]] || die "--repo-dir: '$REPO_DIR' is not a directory"
common_gcloud_flags

install_cmd="set -e; cd ~/${REMOTE_DIR} && python3 -m venv ~/venv && ~/venv/bin/pip install -q -U pip"
install_cmd+=" && ~/venv/bin/pip install -q -U 'jax[tpu]' && ~/venv/bin/pip install -q -e ."
install_cmd+=" && ~/venv/bin/python -c 'import jax; print(jax.process_index(), jax.device_count())'"

run gcloud compute tpus tpu-vm ssh "$NAME" "${GCLOUD_FLAGS[@]}" --worker=all \
  --command="rm -rf ~/${REMOTE_DIR} && mkdir -p ~/${REMOTE_DIR}"
run gcloud compute tpus tpu-vm scp --recurse "$REPO_DIR/." "$NAME:~/${REMOTE_DIR}" \
  "${GCLOUD_FLAGS[@]}" --worker=all
run gcloud compute tpus tpu-vm ssh "$NAME" "${GCLOUD_FLAGS[@]}" --worker=all \
  --command="$install_cmd"
