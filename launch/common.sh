# Shared by launch/tpu_pod.sh and launch/slurm_submit.sh (sourced, not run).

# The jax version energynets is tested with: tpu_pod.sh's setup installs jax[tpu] at it
# (--jax_version=V or TPU_JAX_VERSION=V installs another).
ENERGYNETS_JAX_VERSION=0.10.2

# quote ARG: ARG as one shell word (single-quoted unless it is plain), the quoting of
# Python's shlex.quote, so that a printed command can be pasted and tests can parse it.
quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# quote_all ARGS...: the arguments quoted and joined by spaces.
quote_all() {
  local out="" a
  for a in "$@"; do
    out+="${out:+ }$(quote "$a")"
  done
  printf '%s' "$out"
}

# run_cmd ARGS...: runs the command, or with DRY_RUN=1 prints it (one line, quoted) to
# stdout instead. Progress messages go to stderr, so stdout of a dry run is exactly the
# commands.
run_cmd() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '%s\n' "$(quote_all "$@")"
  else
    echo "+ $(quote_all "$@")" >&2
    "$@"
  fi
}

die() {
  echo "error: $*" >&2
  exit 2
}

# flag_value NAME ARGS...: the value of the last --NAME=VALUE (or --NAME VALUE) in ARGS.
flag_value() {
  local name="$1" value="" found=0
  shift
  while [[ $# -gt 0 ]]; do
    case "$1" in
      "--${name}="*) value="${1#--${name}=}"; found=1 ;;
      "--${name}") [[ $# -gt 1 ]] && { value="$2"; found=1; shift; } ;;
    esac
    shift
  done
  [[ "$found" == 1 ]] && printf '%s' "$value"
}

# require_experiment_flags ARGS...: dies unless ARGS name --config and --workdir, the
# flags experiments.main cannot run without.
require_experiment_flags() {
  local name
  for name in config workdir; do
    [[ -n "$(flag_value "$name" "$@")" ]] || die "missing --${name}=... for \
experiments.main (e.g. --config=experiments/configs/mlp.py:bibtex --workdir=/tmp/run)"
  done
}
