#!/usr/bin/env bash
# Runs the same training command on every worker, then gathers per-worker logs.
# Each worker tees its output to ~/logs/worker.log; afterwards the log of worker i
# is copied to LOG_DIR/worker-i.log. jax.distributed.initialize() finds the
# coordinator from the TPU metadata (jaxrl_agent.learner.distributed).
# Example: tpu_scripts/launch.sh --name rl --zone us-east5-a \
#   --command "python -m jaxrl_agent.train --config configs/tpu_pod.py"
set -euo pipefail
# shellcheck source=tpu_scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
parse_flags "$@"

[[ -n "$TRAIN_COMMAND" ]] || die "--command is required"
common_gcloud_flags

if [[ -z "$NUM_WORKERS" ]]; then
  if [[ "$DRY_RUN" -eq 1 ]]; then
    die "--num-workers is required with --dry-run (no gcloud query is made)"
  fi
  NUM_WORKERS="$(gcloud compute tpus tpu-vm describe "$NAME" "${GCLOUD_FLAGS[@]}" \
    --format='value(networkEndpoints.len())')"
fi

remote_cmd="set -o pipefail; mkdir -p ~/logs && cd ~/${REMOTE_DIR} && source ~/venv/bin/activate"
remote_cmd+=" && (${TRAIN_COMMAND}) 2>&1 | tee ~/logs/worker.log"

status=0
run gcloud compute tpus tpu-vm ssh "$NAME" "${GCLOUD_FLAGS[@]}" --worker=all \
  --command="$remote_cmd" || status=$?

run mkdir -p "$LOG_DIR"
for ((i = 0; i < NUM_WORKERS; i++)); do
  run gcloud compute tpus tpu-vm scp "$NAME:~/logs/worker.log" "$LOG_DIR/worker-$i.log" \
    "${GCLOUD_FLAGS[@]}" --worker="$i" || status=$?
done
exit "$status"
