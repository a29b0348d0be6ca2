#!/usr/bin/env bash
# Run experiments.main on every worker of a Cloud TPU VM pod slice.
#
# usage: bash launch/tpu_pod.sh ACTIONS [launcher options] [experiments.main flags...]
#
# ACTIONS, comma-separated, run in the order given:
#   create  gcloud compute tpus tpu-vm create (the slice)
#   ship    git archive of --ref (default HEAD: committed code only) copied to every
#           worker and unpacked into --remote_dir
#   setup   on every worker: uv (pip --user, else its standalone installer), a fresh
#           virtual environment --venv with Python --python (uv fetches that Python:
#           tpu-ubuntu2204-base's own is older than the 3.11 energynets needs), and in it
#           `uv pip install -e 'REMOTE_DIR[gcs]' 'jax[tpu]==VERSION'` (the gcs extra:
#           gcsfs, which gs:// workdirs need; VERSION: --jax_version)
#   run     on every worker at once (--worker=all): kill stale experiments.main
#           processes and remove /tmp/libtpu_lockfile (a killed run leaves both and the
#           TPU stays taken), then `ENERGYNETS_VENV=VENV bash launch/worker.sh FLAGS
#           --multihost` (the entrypoint local_pod.sh runs; jax.distributed.initialize()
#           finds the other workers by itself), one log per worker. A failed worker
#           ends the others within seconds, and each worker that ends with a non-zero
#           status prints its reason (`worker I: exit status S: ...`). If any worker
#           fails (gcloud's ssh exits non-zero) or the launcher is interrupted, stop
#           runs; a preempted run (status 75: every worker saved the same step) exits
#           with 75, and run again resumes it.
#   stop    kill experiments.main on every worker, and copy the workers' logs into a
#           gs:// --workdir (if one is given)
#   fetch   copy --workdir (with the workers' logs under logs/) to --results_dir here:
#           a gs:// workdir with gcloud storage, another from worker 0
#   delete  delete the slice
#   all     create,ship,setup,run,fetch (stop and delete stay explicit)
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
#   --venv=DIR                  [TPU_VENV] the workers' virtual environment (relative to
#                               the home directory), default energynets-venv
#   --python=VERSION            [TPU_PYTHON] its Python, default 3.11
#   --jax_version=VERSION       [TPU_JAX_VERSION] the jax[tpu] setup installs, default
#                               the version energynets is tested with
#                               (ENERGYNETS_JAX_VERSION in launch/common.sh)
#   --ship_data=DIR             [TPU_SHIP_DATA] ship also copies this local data
#                               directory to REMOTE_DIR/data on every worker (then pass
#                               --config.data.data_dir=data)
#   --spot                      [TPU_SPOT=1] create a Spot slice
#   --dry_run                   [DRY_RUN=1] print every command instead of running it
# Every other argument goes to experiments.main unchanged; run and fetch need --config
# and --workdir. A workdir every worker can write (a gs:// bucket) is what a
# multi-host checkpoint needs; a local path is fetched from worker 0. Each worker's log
# is worker_<I>.log in WORKDIR/logs (a gs:// workdir: in ~/energynets_logs, copied to
# WORKDIR/logs/ when the worker ends or is stopped).
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
venv="${TPU_VENV:-energynets-venv}"
python_version="${TPU_PYTHON:-3.11}"
jax_version="${TPU_JAX_VERSION:-$ENERGYNETS_JAX_VERSION}"
# What experiments.main needs to start jax.distributed on every worker (auto-detected).
distributed_flags=(--multihost)

if [[ $# -lt 1 || "$1" == -* ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  die "the first argument must be ACTIONS (create, ship, setup, run, stop, fetch, delete, all)"
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
    --venv=*) venv="${1#*=}" ;;
    --python=*) python_version="${1#*=}" ;;
    --jax_version=*) jax_version="${1#*=}" ;;
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
    create|ship|setup|run|stop|fetch|delete) ;;
    *) die "unknown action '$action' (expected create, ship, setup, run, stop, fetch, delete \
or all)" ;;
  esac
done
[[ -n "$name" ]] || die "missing --name=... (or TPU_NAME): the TPU slice's name"
[[ -n "$zone" ]] || die "missing --zone=... (or TPU_ZONE): the TPU slice's zone"
[[ "$jax_version" =~ ^[0-9][0-9A-Za-z.+-]*$ ]] || die "--jax_version=$jax_version (or \
TPU_JAX_VERSION): give a jax release, e.g. $ENERGYNETS_JAX_VERSION"
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
# A path on the workers: relative ones are relative to the home directory, where ssh
# starts (written so that the remote shell expands $HOME after any cd).
remote_path() {
  if [[ "$1" == /* ]]; then quote "$1"; else printf '"$HOME"/%s' "$(quote "$1")"; fi
}
venv_dir="$(remote_path "$venv")"
# Processes of an earlier run (a stopped launcher, a failed worker's peers): the TPU
# stays taken by them. The bracket keeps pkill from matching the shell that runs it.
kill_stale="pkill -KILL -f '[e]xperiments[.]main' && sleep 1"

# stop_workers: kills the run on every worker; a gs:// workdir gets their logs.
stop_workers() {
  local stop="$kill_stale; true" workdir
  workdir="$(flag_value workdir ${experiment_args[@]+"${experiment_args[@]}"})" || true
  if [[ "$workdir" == gs://* ]]; then
    stop+="; gcloud storage cp \"\$HOME\"/energynets_logs/worker_*.log \
$(quote "${workdir%/}/logs/") || true"
  fi
  on_all_workers "$stop"
}

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
      # The system Python of the TPU VM images is older than energynets supports: uv
      # makes an isolated environment with its own Python (downloaded if missing). jax
      # is pinned: a newer jax[tpu] than the tested one can change what the runs compute.
      on_all_workers "export PATH=\"\$HOME/.local/bin:\$PATH\" && { command -v uv >/dev/null \
|| python3 -m pip install --user --quiet uv || curl -LsSf https://astral.sh/uv/install.sh | sh; } \
&& rm -rf $venv_dir && uv venv --python $(quote "$python_version") $venv_dir \
&& uv pip install --python $venv_dir/bin/python -e $(remote_path "${remote_dir}[gcs]") \
$(quote "jax[tpu]==$jax_version") && $venv_dir/bin/python --version"
      ;;
    run)
      main_args="$(quote_all "${experiment_args[@]}" "${distributed_flags[@]}")"
      interrupted=0
      trap 'interrupted=1' INT TERM HUP
      status=0
      on_all_workers "$remote_cd && { $kill_stale; rm -f /tmp/libtpu_lockfile; true; } && \
ENERGYNETS_VENV=$venv_dir bash launch/worker.sh $main_args" || status=$?
      trap - INT TERM HUP
      if [[ "$status" == 75 && "$interrupted" == 0 ]]; then
        # experiments.main's status after a preemption notice: every worker saved the
        # same step.
        echo "preempted: every worker saved a checkpoint at the step named in its \
'worker <I>: exit status 75: ... preempted at step S' line above; run the run action \
again to resume" >&2
        stop_workers
        exit 75
      fi
      if [[ "$status" != 0 || "$interrupted" == 1 ]]; then
        why="the run failed on a worker (gcloud ssh exit status $status)"
        [[ "$interrupted" == 1 ]] && why="the launcher was interrupted"
        echo "error: $why: stopping every worker; each one's log is worker_<I>.log in \
WORKDIR/logs (the fetch action copies them), and a failed worker's reason is its \
'worker <I>: exit status' line above" >&2
        stop_workers
        exit $(( status ? status : 130 ))
      fi
      ;;
    stop)
      stop_workers
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
