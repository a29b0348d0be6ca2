#!/usr/bin/env bash
# Submit experiments.main as a multi-node GPU job (launch/slurm.sbatch) with sbatch.
#
# usage: bash launch/slurm_submit.sh [launcher options] [experiments.main flags...]
#
# Launcher options:
#   --nodes=N             default 2
#   --gpus_per_node=G     default 8
#   --cpus_per_task=C     default 8
#   --time=HH:MM:SS       default 04:00:00
#   --partition=P         default: the cluster's (or sbatch's SBATCH_PARTITION)
#   --account=A           default: the cluster's (or SBATCH_ACCOUNT)
#   --job_name=NAME       default energynets
#   --venv=DIR            [ENERGYNETS_VENV] the virtual environment (Python >= 3.11,
#                         energynets installed) every task activates; on a shared
#                         filesystem
#   --env_activate=CMD    [ENERGYNETS_ENV_ACTIVATE] or a command that activates it,
#                         e.g. 'module load cuda/12.4; conda activate energynets'
#                         (neither: the python on the nodes' PATH)
#   --dry_run             (or DRY_RUN=1) print the sbatch command instead of submitting
# Every other argument goes to experiments.main unchanged; --config and --workdir are
# required. The job runs from this repository's root, which (with the workdir and the
# data) must be on a filesystem every node sees.
#
# Each task's output is WORKDIR/logs/worker_<I>.log (launch/worker.sh).
#
# example:
#   bash launch/slurm_submit.sh --nodes=4 --gpus_per_node=8 --partition=gpu \
#     --venv=/nfs/venvs/energynets \
#     --config=experiments/configs/seal_dynamic.py:bibtex --workdir=/nfs/runs/seal \
#     --config.data.data_dir=/nfs/data
set -euo pipefail
source "$(dirname "$0")/common.sh"
REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"

nodes=2
gpus_per_node=8
cpus_per_task=8
time_limit=04:00:00
partition=""
account=""
job_name="energynets"
venv="${ENERGYNETS_VENV:-}"
env_activate="${ENERGYNETS_ENV_ACTIVATE:-}"
experiment_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;;
    --gpus_per_node=*) gpus_per_node="${1#*=}" ;;
    --cpus_per_task=*) cpus_per_task="${1#*=}" ;;
    --time=*) time_limit="${1#*=}" ;;
    --partition=*) partition="${1#*=}" ;;
    --account=*) account="${1#*=}" ;;
    --job_name=*) job_name="${1#*=}" ;;
    --venv=*) venv="${1#*=}" ;;
    --env_activate=*) env_activate="${1#*=}" ;;
    --dry_run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) experiment_args+=("$1") ;;
  esac
  shift
done
export DRY_RUN="${DRY_RUN:-0}"
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer, got '$nodes'"
[[ "$gpus_per_node" =~ ^[1-9][0-9]*$ ]] || \
  die "--gpus_per_node must be a positive integer, got '$gpus_per_node'"
require_experiment_flags ${experiment_args[@]+"${experiment_args[@]}"}

submit=(sbatch --job-name="$job_name" --nodes="$nodes" --ntasks-per-node=1
        --gpus-per-node="$gpus_per_node" --cpus-per-task="$cpus_per_task" --time="$time_limit"
        --chdir="$REPO_ROOT")
[[ -n "$partition" ]] && submit+=(--partition="$partition")
[[ -n "$account" ]] && submit+=(--account="$account")
# sbatch passes its environment on to the job (and srun to every task): the
# environment's name travels that way, whatever characters the command has.
environment=()
if [[ -n "$venv" ]]; then
  [[ "$venv" == /* ]] || venv="$(pwd)/$venv"
  [[ "$DRY_RUN" == 1 || -f "$venv/bin/activate" ]] || die "--venv=$venv is not a virtual \
environment (no bin/activate): create it (python3.11 -m venv DIR; DIR/bin/pip install -e .)"
  environment+=(ENERGYNETS_VENV="$venv")
fi
[[ -n "$env_activate" ]] && environment+=(ENERGYNETS_ENV_ACTIVATE="$env_activate")
[[ ${#environment[@]} -gt 0 ]] && submit=(env "${environment[@]}" "${submit[@]}")
run_cmd "${submit[@]}" "$REPO_ROOT/launch/slurm.sbatch" "${experiment_args[@]}"
