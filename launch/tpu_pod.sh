#!/usr/bin/env bash
# Run experiments.main on every worker of a Cloud TPU VM pod slice.
#
# usage: bash launch/tpu_pod.sh ACTIONS [launcher options] [experiments.main flags...]
#
# ACTIONS, comma-separated, run in the order given:
#   create  gcloud compute tpus tpu-vm create (the slice)
#   ship    git archive of --ref (default HEAD: committed code only) copied to every
#           worker and unpacked into --remote_dir
#   setup   pip install -e . and jax[tpu] on every worker
#   run     python -m experiments.main FLAGS on every worker at once (--worker=all);
#           jax.distributed.initialize() finds the other workers by itself on a TPU pod
#   fetch   copy --workdir from worker 0 to --results_dir here (a gs:// workdir is
#           copied with gcloud storage)
#   delete  delete the slice
#   all     create,ship,setup,run,fetch (delete stays explicit)
#
# Launcher options (each also from the environment variable in brackets):
#   --name=NAME                 [TPU_NAME] slice name (required)
#   --zone=ZONE                 [TPU_ZONE] e.g. us-central2-b (required)
#   --project=PROJECT           [TPU_PROJECT] default: gcloud's configured project
#   --accelerator_type=TYPE     [TPU_ACCELERATOR_TYPE] default v4-16
#   --runtime_version=VERSION   [TPU_RUNTIME_VERSION] default tpu-ubuntu2204-base
#   --remote_dir=DIR            [TPU_REMOTE_DIR] code directory on the workers
#                               (relative to the home directory), default energynets
#   --results_dir=DIR           [TPU_RESULTS_DIR] local copy of the workdir, default
#                               tpu_results/NAME
#   --ref=REF                   [TPU_REF] git revision to ship, default HEAD
#   --ship_data=DIR             [TPU_SHIP_DATA] ship also copies this local data
#                               directory to REMOTE_DIR/data on every worker (then pass
#                               --config.data.data_dir=data)
#   --spot                      [TPU_SPOT=1] create a Spot slice
#   --dry_run                   [DRY_RUN=1] print every command instead of running it
# Every other argument goes to experiments.main unchanged; run and fetch need --config
# and --workdir. A workdir every worker can write (a gs:// bucket) is what a multi-host
# checkpoint needs; a local path is fetched from worker 0.
#
# example:
#   bash launch/tpu_pod.sh all --name=en-v4 --zone=us-central2-b --accelerator_type=v4-16 \
#     --config=experiments/configs/seal_dynamic.py:bibtex --workdir=gs://BUCKET/seal_bibtex \
#     --ship_data=../shared/data --config.data.data_dir=data
set -euo pipefail
source "$(dirname "$0")/common.sh"

REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
name="${TPU_NAME:-}"
zone="${TPU_ZONE:-}"
project="${TPU_PROJECT:-}"
accelerator_type="${TPU_ACCELERATOR_TYPE:-v4-16}"
runtime_version="${TPU_RUNTIME_VERSION:-tpu-ubuntu2204-base}"
remote_dir="${TPU_REMOTE_DIR:-energynets}"
results_dir="${TPU_RESULTS_DIR:-}"
ref="${TPU_REF:-HEAD}"
ship_data="${TPU_SHIP_DATA:-}"
spot="${TPU_SPOT:-0}"
# What experiments.main needs to start jax.distributed on every worker (auto-detected).
distributed_flags=(--multihost)

if [[ $# -lt 1 || "$1" == -* ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  die "the first argument must be ACTIONS (create, ship, setup, run, fetch, delete, all)"
fi
actions="$1"
shift
experiment_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name=*) name="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --project=*) project="${1#*=}" ;;
    --accelerator_type=*) accelerator_type="${1#*=}" ;;
    --runtime_version=*) runtime_version="${1#*=}" ;;
    --remote_dir=*) remote_dir="${1#*=}" ;;
    --results_dir=*) results_dir="${1#*=}" ;;
    --ref=*) ref="${1#*=}" ;;
    --ship_data=*) ship_data="${1#*=}" ;;
    --spot) spot=1 ;;
    --dry_run) DRY_RUN=1 ;;
    *) experiment_args+=("$1") ;;
  esac
  shift
done
export DRY_RUN="${DRY_RUN:-0}"
[[ "$actions" == all ]] && actions="create,ship,setup,run,fetch"
IFS=',' read -r -a action_list <<< "$actions"
for action in "${action_list[@]}"; do
  case "$action" in
    create|ship|setup|run|fetch|delete) ;;
    *) die "unknown action '$action' (expected create, ship, setup, run, fetch, delete or all)" ;;
  esac
done
[[ -n "$name" ]] || die "missing --name=... (or TPU_NAME): the TPU slice's name"
[[ -n "$zone" ]] || die "missing --zone=... (or TPU_ZONE): the TPU slice's zone"
results_dir="${results_dir:-tpu_results/${name}}"
for action in "${action_list[@]}"; do
  if [[ "$action" == run || "$action" == fetch ]]; then
    require_experiment_flags ${experiment_args[@]+"${experiment_args[@]}"}
  fi
done

# The options every gcloud tpu-vm command takes.
location=(--zone="$zone")
[[ -n "$project" ]] && location+=(--project="$project")
tpu=(gcloud compute tpus tpu-vm)

on_all_workers() {  # on_all_workers REMOTE_COMMAND: one shell command line, every worker
  run_cmd "${tpu[@]}" ssh "$name" "${location[@]}" --worker=all --command="$1"
}

remote_cd="cd $(quote "$remote_dir")"
for action in "${action_list[@]}"; do
  case "$action" in
    create)
      create=("${tpu[@]}" create "$name" "${location[@]}" --accelerator-type="$accelerator_type"
              --version="$runtime_version")
      [[ "$spot" == 1 ]] && create+=(--spot)
      run_cmd "${create[@]}"
      ;;
    ship)
      archive="${TMPDIR:-/tmp}/energynets-${name}.tar.gz"
      run_cmd git -C "$REPO_ROOT" archive --format=tar.gz --output="$archive" "$ref"
      run_cmd "${tpu[@]}" scp "$archive" "${name}:energynets.tar.gz" "${location[@]}" \
        --worker=all
      dir="$(quote "$remote_dir")"
      on_all_workers "rm -rf $dir && mkdir -p $dir && tar -xzf energynets.tar.gz -C $dir"
      if [[ -n "$ship_data" ]]; then
        # Into a fresh REMOTE_DIR/data (an existing one would get the folder inside it).
        on_all_workers "rm -rf $(quote "$remote_dir/data")"
        run_cmd "${tpu[@]}" scp --recurse "$ship_data" "${name}:${remote_dir}/data" \
          "${location[@]}" --worker=all
      fi
      ;;
    setup)
      on_all_workers "$remote_cd && python3 -m pip install -e . 'jax[tpu]'"
      ;;
    run)
      main_args="$(quote_all "${experiment_args[@]}" "${distributed_flags[@]}")"
      on_all_workers "$remote_cd && python3 -m experiments.main $main_args"
      ;;
    fetch)
      workdir="$(flag_value workdir "${experiment_args[@]}")"
      run_cmd mkdir -p "$results_dir"
      if [[ "$workdir" == gs://* ]]; then
        run_cmd gcloud storage cp --recursive "$workdir" "$results_dir"
      else
        # A relative workdir is relative to the code directory, where run started.
        [[ "$workdir" == /* ]] || workdir="${remote_dir}/${workdir}"
        run_cmd "${tpu[@]}" scp --recurse "${name}:${workdir}" "$results_dir" \
          "${location[@]}" --worker=0
      fi
      ;;
    delete)
      run_cmd "${tpu[@]}" delete "$name" "${location[@]}" --quiet
      ;;
  esac
done
