#!/usr/bin/env bash
# One process of a (multi-process) run: the command every launcher starts on each host
# or task (local_pod.sh, tpu_pod.sh's run action, slurm.sbatch's srun), so that a run on
# one machine exercises what a pod or a cluster runs.
#
# usage: bash launch/worker.sh [experiments.main flags...]
#
# 1. Activates the environment: ENERGYNETS_VENV=DIR sources DIR/bin/activate (a venv,
#    e.g. the one tpu_pod.sh's setup creates with uv); ENERGYNETS_ENV_ACTIVATE='CMD' runs
#    CMD in this shell first (e.g. 'module load cuda/12.4; conda activate energynets').
#    The interpreter is ENERGYNETS_PYTHON (a path or a command name) when it is set:
#    the one a launcher or a test was started with, so that no other python on PATH is
#    picked by accident; else the python the activated environment puts on PATH, else
#    the python on PATH. It must be Python 3.11 or newer (pyproject.toml).
# 2. Appends everything the process prints to one log per worker,
#    LOG_DIR/worker_<I>.log, where I is this process's index: --process_id=I, else
#    SLURM_PROCID, else the TPU VM's worker number, else 0. LOG_DIR is
#    ENERGYNETS_LOG_DIR, default WORKDIR/logs for a workdir on a filesystem, or
#    ~/energynets_logs for a gs:// workdir; then the log is also copied to
#    WORKDIR/logs/ when the process ends (gcloud storage cp), so that it is fetched with
#    the results.
# 3. Runs python -m experiments.main FLAGS from the repository root (a relative
#    --workdir is relative to it). The distributed flags are among FLAGS:
#    --coordinator_address=HOST:PORT --num_processes=N --process_id=I (local_pod.sh) or
#    --multihost (TPU pods, SLURM: JAX detects the cluster).
# 4. Exits with experiments.main's status: 0 done, 2 a mistake in the command or the
#    data, 1 another failure, 75 preempted (a checkpoint saved: rerun to resume). A
#    status other than 0 also prints `worker I: exit status S: <the log's reason line>`
#    on stderr.
#    TERM, INT and HUP are passed on to it (TERM is a preemption notice).
set -uo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
require_experiment_flags "$@"

if [[ -n "${ENERGYNETS_ENV_ACTIVATE:-}" ]]; then
  eval "$ENERGYNETS_ENV_ACTIVATE" || die "ENERGYNETS_ENV_ACTIVATE='$ENERGYNETS_ENV_ACTIVATE' \
failed: fix the command, or unset it to use the python on PATH"
fi
if [[ -n "${ENERGYNETS_VENV:-}" ]]; then
  [[ -f "$ENERGYNETS_VENV/bin/activate" ]] || die "ENERGYNETS_VENV=$ENERGYNETS_VENV is not \
a virtual environment (no bin/activate): create it (launch/README.md) or fix the path"
  # shellcheck disable=SC1091
  source "$ENERGYNETS_VENV/bin/activate"
fi
if [[ -n "${ENERGYNETS_PYTHON:-}" ]]; then
  python=$(command -v "$ENERGYNETS_PYTHON") || die "ENERGYNETS_PYTHON=$ENERGYNETS_PYTHON is \
not an interpreter this shell can run: give the path of a python with energynets installed"
else
  python=$(command -v python || command -v python3) || die "no python on PATH: set \
ENERGYNETS_PYTHON to an interpreter, or ENERGYNETS_VENV to an environment, with Python >= 3.11"
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$python is Python \
$("$python" -c 'import platform; print(platform.python_version())'), energynets needs \
>= 3.11: set ENERGYNETS_VENV to an environment with Python >= 3.11"

worker="$(flag_value process_id "$@")"
if [[ -z "$worker" ]]; then
  worker="${SLURM_PROCID:-}"
fi
multihost=0
for a in "$@"; do [[ "$a" == --multihost || "$a" == --multihost=[Tt]rue ]] && multihost=1; done
if [[ -z "$worker" && -z "${TPU_WORKER_ID:-}" && "$multihost" == 1 ]] && \
    command -v curl >/dev/null; then
  # A Cloud TPU VM knows its worker number from the metadata server (JAX asks it too).
  metadata=http://metadata.google.internal/computeMetadata/v1/instance/attributes
  TPU_WORKER_ID="$(curl -sf -m 2 -H 'Metadata-Flavor: Google' \
    "$metadata/agent-worker-number" 2>/dev/null)" || true
fi
worker="${worker:-${TPU_WORKER_ID:-0}}"

workdir="$(flag_value workdir "$@")"
remote=0
[[ "$workdir" == *://* ]] && remote=1
if [[ "$remote" == 1 ]]; then
  log_dir="${ENERGYNETS_LOG_DIR:-$HOME/energynets_logs}"
else
  log_dir="${ENERGYNETS_LOG_DIR:-$workdir/logs}"
fi
mkdir -p "$log_dir" || die "cannot create the log directory $log_dir: set \
ENERGYNETS_LOG_DIR to a writable directory"
log="$log_dir/worker_${worker}.log"

# The python process, in the background so that this shell can pass signals on to it;
# its pid is in the log's header (it execs from the subshell whose pid it is).
(
  echo "=== worker $worker on $(hostname), pid $BASHPID, $(date -u +%FT%TZ): $python -m \
experiments.main $(quote_all "$@")"
  exec "$python" -m experiments.main "$@"
) >>"$log" 2>&1 &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
echo "worker $worker: pid $child, log $log" >&2
status=0
wait "$child" 2>/dev/null || status=$?  # (no "Killed" notice: the launcher says it)
# A trapped signal interrupts wait (status > 128) before the child has ended: wait on.
while kill -0 "$child" 2>/dev/null; do
  status=0
  wait "$child" 2>/dev/null || status=$?
done
echo "=== worker $worker: exit status $status" >>"$log"
if [[ "$status" != 0 ]]; then
  # Why, in one line, where the launcher shows it (a terminal, gcloud's ssh, srun's
  # output): the last line experiments.main wrote about how it ended.
  why="$(grep -aE '^[A-Za-z0-9_.]+: (error|preempted)' "$log" | tail -n 1)"
  echo "worker $worker: exit status $status: ${why:-no reason in $log (killed?)}" >&2
fi
if [[ "$remote" == 1 ]] && command -v gcloud >/dev/null; then
  gcloud storage cp "$log" "${workdir%/}/logs/worker_${worker}.log" >/dev/null 2>&1 || \
    echo "worker $worker: could not copy $log to ${workdir%/}/logs/" >&2
fi
exit "$status"
