#!/usr/bin/env bash
# Globals set here are read by the scripts that source this file:
# shellcheck disable=SC2034
# Common flag parsing and command runner for the Cloud TPU VM scripts.
# Sourced by create.sh, setup.sh, launch.sh and delete.sh; not run directly.
#
# Flags (all scripts):
#   --name NAME              TPU VM name (required)
#   --zone ZONE              e.g. us-east5-a (required)
#   --project PROJECT        GCP project (default: gcloud's configured project)
#   --dry-run                print the gcloud commands instead of running them
# create.sh:
#   --accelerator-type TYPE  v5litepod-N, v5p-N or v6e-N (required)
#   --version VERSION        TPU runtime (default: the one matching TYPE)
#   --spot                   request Spot capacity
# setup.sh:
#   --repo-dir DIR           local checkout to copy to every worker (default: ..)
# launch.sh:
#   --command CMD            training command run on every worker (required)
#   --num-workers N          hosts in the slice (default: asked from gcloud)
#   --log-dir DIR            local directory for per-worker logs (default: ./tpu_logs)

set -euo pipefail

NAME=""
ZONE=""
PROJECT=""
DRY_RUN=0
ACCELERATOR_TYPE=""
VERSION=""
SPOT=0
REPO_DIR=""
TRAIN_COMMAND=""
NUM_WORKERS=""
LOG_DIR="./tpu_logs"
REMOTE_DIR="jaxrl-agent"  # relative to the remote home directory

die() {
  echo "error: $*" >&2
  exit 2
}

parse_flags() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --name) NAME="${2:?--name needs a value}"; shift 2 ;;
      --zone) ZONE="${2:?--zone needs a value}"; shift 2 ;;
      --project) PROJECT="${2:?--project needs a value}"; shift 2 ;;
      --accelerator-type) ACCELERATOR_TYPE="${2:?--accelerator-type needs a value}"; shift 2 ;;
      --version) VERSION="${2:?--version needs a value}"; shift 2 ;;
      --repo-dir) REPO_DIR="${2:?--repo-dir needs a value}"; shift 2 ;;
      --command) TRAIN_COMMAND="${2:?--command needs a value}"; shift 2 ;;
      --num-workers) NUM_WORKERS="${2:?--num-workers needs a value}"; shift 2 ;;
      --log-dir) LOG_DIR="${2:?--log-dir needs a value}"; shift 2 ;;
      --spot) SPOT=1; shift ;;
      --dry-run) DRY_RUN=1; shift ;;
      -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) die "unknown flag '$1' (see --help)" ;;
    esac
  done
  [[ -n "$NAME" ]] || die "--name is required"
  [[ -n "$ZONE" ]] || die "--zone is required"
  if [[ -n "$NUM_WORKERS" && ! "$NUM_WORKERS" =~ ^[1-9][0-9]*$ ]]; then
    die "--num-workers: expected a positive integer, got '$NUM_WORKERS'"
  fi
}

# Runtime (software version) matching an accelerator type; see
# https://cloud.google.com/tpu/docs/runtimes
runtime_for() {
  case "$1" in
    v5litepod-*) echo "v2-alpha-tpuv5-lite" ;;
    v5p-*) echo "v2-alpha-tpuv5" ;;
    v6e-*) echo "v2-alpha-tpuv6e" ;;
    *) die "--accelerator-type: expected v5litepod-N, v5p-N or v6e-N, got '$1'" ;;
  esac
}

# Flags shared by every gcloud compute tpus tpu-vm call, as an array.
common_gcloud_flags() {
  GCLOUD_FLAGS=(--zone="$ZONE")
  if [[ -n "$PROJECT" ]]; then
    GCLOUD_FLAGS+=(--project="$PROJECT")
  fi
}

# Runs a command, or prints it (shell-quoted, one line) with --dry-run.
run() {
  if [[ "$DRY_RUN" -eq 1 ]]; then
    printf '%q ' "$@" | sed 's/ $//'
    printf '\n'
  else
    "$@"
  fi
}
