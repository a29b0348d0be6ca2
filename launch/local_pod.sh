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
# LOG_DIR/worker_I.log (LOG_DIR: ENERGYNETS_LOG_DIR, default WORKDIR/logs).
#
# A failure: a process that fails tells the others, which end within seconds with its
# status. As soon as one worker exits with a non-zero status (other than 75), the others
# still running are stopped (TERM, then KILL after LOCAL_POD_GRACE_S seconds, default
# 3), one line names the failed worker, its status and its log, the next gives the
# reason the process printed last (its `experiments.main: error: ...` line), and the
# launcher exits with that status.
# A preemption: SIGTERM to the workers' processes (or to this launcher, which passes it
# on) makes every process save a checkpoint at the same step and exit with status 75;
# the launcher waits for all of them (LOCAL_POD_PREEMPT_WAIT_S, default 120), prints
# `local_pod: preempted at step S: rerun the same command to resume` and exits with 75.
# Ctrl-C (INT) or HUP stop all workers (status 130).
# Rerun the same command on the same workdir to resume from the last checkpoint.
#
# Environment: ENERGYNETS_DEVICES_PER_PROCESS (CPU devices per process, default 1),
# LOCAL_POD_PORT (the coordinator's port, default: a free one), and worker.sh's
# (ENERGYNETS_PYTHON, ENERGYNETS_VENV, ENERGYNETS_ENV_ACTIVATE, ENERGYNETS_LOG_DIR).
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
preempt_wait="${LOCAL_POD_PREEMPT_WAIT_S:-120}"
[[ "$preempt_wait" =~ ^[0-9]+$ ]] || die "LOCAL_POD_PREEMPT_WAIT_S must be a whole number \
of seconds, got '$preempt_wait'"
# experiments.main's status after saving a checkpoint at a preemption notice.
EXIT_PREEMPTED=75
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
# reason LOG: the last line the process wrote about why it ended (experiments.main's
# `<program>: error: ...` or `<program>: preempted at step S: ...`).
reason() {
  grep -aE '^[A-Za-z0-9_.]+: (error|preempted)' "$1" 2>/dev/null | tail -n 1
}
# TERM to the launcher is a preemption notice: passed on to every worker, which save
# and exit with EXIT_PREEMPTED (the loop below reports it).
on_term() {
  local pid
  trap - TERM
  echo "local_pod: TERM: passing it on to the $n workers (they save a checkpoint and \
exit)" >&2
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
  done
}
trap on_signal INT HUP
trap on_term TERM

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
preempted=""  # the first worker that exited with EXIT_PREEMPTED
deadline=""
while (( remaining > 0 )); do
  for (( i = 0; i < n; i++ )); do
    [[ -n "${done_[$i]:-}" ]] && continue
    kill -0 "${pids[$i]}" 2>/dev/null && continue
    status=0
    wait "${pids[$i]}" || status=$?
    done_[$i]=1
    remaining=$(( remaining - 1 ))
    log="$log_dir/worker_$i.log"
    if (( status == EXIT_PREEMPTED )); then
      # The others save the same step: wait for them, not stop them.
      if [[ -z "$preempted" ]]; then
        preempted="$i"
        deadline=$(( SECONDS + preempt_wait ))
      fi
    elif (( status != 0 )); then
      how="exited with status $status"
      (( status > 128 )) && how+=" (killed by SIG$(kill -l $(( status - 128 )) 2>/dev/null))"
      trap - INT TERM HUP
      echo "local_pod: error: worker $i $how, log $log; stopping the other workers" >&2
      why="$(reason "$log")"
      echo "local_pod: worker $i: ${why:-no reason in its log (killed, or it crashed)}" >&2
      stop_all
      exit "$status"
    fi
  done
  if [[ -n "$preempted" && "$remaining" -gt 0 ]] && (( SECONDS > deadline )); then
    trap - INT TERM HUP
    echo "local_pod: error: worker $preempted was preempted, but not every worker ended \
within $preempt_wait s (LOCAL_POD_PREEMPT_WAIT_S); stopping them" >&2
    stop_all
    exit 1
  fi
  (( remaining > 0 )) && sleep 0.2
done
if [[ -n "$preempted" ]]; then
  step="$(reason "$log_dir/worker_$preempted.log" | \
    sed -n 's/.*preempted at step \([0-9]*\).*/\1/p')"
  echo "local_pod: preempted at step ${step:-?}: rerun the same command to resume; logs \
in $log_dir" >&2
  exit "$EXIT_PREEMPTED"
fi
echo "local_pod: all $n workers finished; logs in $log_dir" >&2
