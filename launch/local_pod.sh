#!/usr/bin/env bash
# A pod on this machine: N processes of one multi-process run, each started through
# launch/worker.sh (the entrypoint tpu_pod.sh and slurm.sbatch run on every host), with
# a loopback coordinator and its own CPU devices. What the TPU and SLURM launchers do on
# many hosts can be run and tested here, failures included.
#
# usage: bash launch/local_pod.sh N [experiments.main flags...]
#
# Worker I runs `launch/worker.sh FLAGS --coordinator_address=127.0.0.1:PORT
# --num_processes=N --process_id=I` with JAX_PLATFORMS=cpu; its log is
# LOG_DIR/worker_I.log (LOG_DIR: ENERGYNETS_LOG_DIR, default WORKDIR/logs). As soon as
# one worker exits with a non-zero status, the others are stopped (TERM, then KILL after
# LOCAL_POD_GRACE_S seconds, default 3: a process of a JAX distributed run takes TERM as
# a preemption notice and goes on, and one blocked in a collective whose peer died does
# not end by itself), one line names the failed worker, its status and its log, and the
# launcher exits with that status. Ctrl-C (INT), TERM or HUP stop all workers.
# Rerun the same command on the same workdir to resume from the last checkpoint.
#
# Environment: ENERGYNETS_DEVICES_PER_PROCESS (CPU devices per process, default 1),
# LOCAL_POD_PORT (the coordinator's port, default: a free one), and worker.sh's
# (ENERGYNETS_VENV, ENERGYNETS_ENV_ACTIVATE, ENERGYNETS_LOG_DIR).
#
# example:
#   bash launch/local_pod.sh 2 --config=experiments/configs/mlp.py:synthetic \
#     --workdir=/tmp/mlp_pod
set -uo pipefail
source "$(dirname "$0")/common.sh"
REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# Where worker.sh runs experiments.main: a relative --workdir is relative to it.
cd "$REPO_ROOT"

if [[ $# -lt 1 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  die "the first argument must be the number of processes N (a positive integer)"
fi
n="$1"
shift
require_experiment_flags "$@"
for a in "$@"; do
  case "$a" in
    --multihost*|--coordinator_address*|--num_processes*|--process_id*)
      die "local_pod.sh sets the distributed flags itself: drop ${a%%=*}" ;;
  esac
done
devices="${ENERGYNETS_DEVICES_PER_PROCESS:-1}"
[[ "$devices" =~ ^[1-9][0-9]*$ ]] || die "ENERGYNETS_DEVICES_PER_PROCESS must be a positive \
integer, got '$devices'"
grace="${LOCAL_POD_GRACE_S:-3}"
[[ "$grace" =~ ^[0-9]+$ ]] || die "LOCAL_POD_GRACE_S must be a whole number of seconds, \
got '$grace'"
workdir="$(flag_value workdir "$@")"
if [[ "$workdir" == *://* ]]; then
  log_dir="${ENERGYNETS_LOG_DIR:-$HOME/energynets_logs}"
else
  log_dir="${ENERGYNETS_LOG_DIR:-$workdir/logs}"
fi

# A port nothing listens on, below Linux's ephemeral range (32768-60999), where no
# outgoing connection holds it either.
port="${LOCAL_POD_PORT:-}"
for _ in $(seq 200); do
  [[ -n "$port" ]] && break
  candidate=$(( RANDOM % 12000 + 20000 ))
  (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null || port="$candidate"
done
[[ -n "$port" ]] || die "found no free port on 127.0.0.1: set LOCAL_POD_PORT"

# Job control: every worker in its own process group, so that stopping one stops its
# python too, and a Ctrl-C in the terminal reaches this launcher only.
set -m
pids=()
any_alive() {  # any_alive: whether a process of any worker's group is left
  local pid
  for pid in "${pids[@]}"; do
    kill -0 -- "-$pid" 2>/dev/null && return 0
  done
  return 1
}
stop_all() {  # stop_all: TERM to every worker still running, KILL after the grace period
  local pid waited
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
  done
  for (( waited = 0; waited < grace * 10 && $(any_alive; echo $?) == 0; waited++ )); do
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -KILL -- "-$pid" 2>/dev/null
  done
  wait 2>/dev/null
  # A killed JAX process takes a moment to go (its worker.sh, killed too, does not wait
  # for it): return once every group is gone, so that nothing outlives the launcher.
  for (( waited = 0; waited < 50 && $(any_alive; echo $?) == 0; waited++ )); do
    sleep 0.1
  done
}
on_signal() {
  trap - INT TERM HUP
  echo "local_pod: interrupted: stopping all $n workers" >&2
  stop_all
  exit 130
}
trap on_signal INT TERM HUP

mkdir -p "$log_dir" || die "cannot create the log directory $log_dir: set ENERGYNETS_LOG_DIR"
echo "local_pod: $n worker(s) of $devices CPU device(s) each, coordinator 127.0.0.1:$port, \
logs in $log_dir/worker_<i>.log" >&2
for (( i = 0; i < n; i++ )); do
  ENERGYNETS_LOG_DIR="$log_dir" JAX_PLATFORMS=cpu \
    XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=$devices" \
    bash launch/worker.sh "$@" --coordinator_address="127.0.0.1:$port" \
    --num_processes="$n" --process_id="$i" &
  pids+=("$!")
done

# Poll rather than `wait -n`: that needs bash >= 4.3 (macOS ships 3.2).
remaining="$n"
declare -a done_=()
while (( remaining > 0 )); do
  for (( i = 0; i < n; i++ )); do
    [[ -n "${done_[$i]:-}" ]] && continue
    kill -0 "${pids[$i]}" 2>/dev/null && continue
    status=0
    wait "${pids[$i]}" || status=$?
    done_[$i]=1
    remaining=$(( remaining - 1 ))
    if (( status != 0 )); then
      how="exited with status $status"
      (( status > 128 )) && how+=" (killed by SIG$(kill -l $(( status - 128 )) 2>/dev/null))"
      trap - INT TERM HUP
      echo "local_pod: error: worker $i $how, log $log_dir/worker_$i.log; stopping the \
other workers" >&2
      stop_all
      exit "$status"
    fi
  done
  (( remaining > 0 )) && sleep 0.2
done
echo "local_pod: all $n workers finished; logs in $log_dir" >&2
