#!/usr/bin/env bash
# Several nodes from an Open MPI hostfile: one rank per slot (one slot per GPU), with the NCCL
# and Open MPI settings of an InfiniBand (or plain TCP) cluster. See docs/operations.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/elastic.sh"

usage() {
  cat <<'EOF'
Usage: launch/train-multinode.sh --hostfile FILE [options] CONFIG [key=value ...]

Runs `mpirun --hostfile FILE megabatch train --config CONFIG [key=value ...]` over the hosts of
FILE: one rank per slot, filled host by host, so write one slot per GPU:
    node01 slots=8
    node02 slots=8
A host named twice counts twice (`localhost` on two lines = 2 ranks on this machine).
Rank r drives GPU (local rank % visible GPUs) of its host. Every host needs the megabatch
binary, Open MPI, and the config and data files at the same paths (a shared file system).

Options:
  --hostfile FILE      Open MPI hostfile (required)
  -n, --nproc N        total ranks; default: the sum of the slots in FILE
  --cpus-per-rank C    cores per rank (OMP_NUM_THREADS); default: physical cores of this
                       node / the most slots of one host (at least 1)
  --bind MODE          core (default: --map-by slot:PE=C --bind-to core) or none
  --net MODE           ib (default): MPI over UCX (--mca pml ucx), NCCL over InfiniBand
                       tcp: MPI over TCP (pml ob1, btl tcp), NCCL over sockets (NCCL_IB_DISABLE=1)
  --ifname IF[,IF]     the Ethernet/IPoIB interface(s) for bootstrap and TCP traffic: sets
                       NCCL_SOCKET_IFNAME and Open MPI's oob/btl_tcp_if_include
  --ib-hca LIST        InfiniBand adapters for NCCL and UCX, e.g. mlx5_0,mlx5_1: sets
                       NCCL_IB_HCA=LIST and UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1
  --cpu                train on the CPU (adds train.device=cpu)
Restarts (docs/operations.md, "Restarts after a lost host"):
  --max-restarts N     after a lost host, a cut link or a dead rank, start again by itself
                       on the hosts that still answer, from checkpoints/latest, up to N
                       times (default 0: never). A bad config, data or checkpoint (exit 2, 3,
                       4), an out-of-memory end or a user's stop is never retried.
  --min-hosts M        restart only on at least M hosts (default 1)
  --host-wait S        with fewer than M hosts answering, probe for up to S seconds before
                       giving up (default 300)
  --probe-timeout S    a host that does not answer `ssh HOST true` (the plm_rsh_agent when
                       MB_MPIRUN_ARGS names one) within S seconds is lost (default 10)
  --probe-every S      seconds between probes of missing hosts (default 10)
  --scale-up           take a lost host back when it answers again: the job checkpoints at
                       the next step and starts again with it (costs a stop and a start)
  --dry-run            print the mpirun command, run nothing
  -h, --help           this text

Everything after CONFIG is passed to `megabatch train` unchanged. Extra mpirun options go in
$MB_MPIRUN_ARGS (split on spaces), e.g. MB_MPIRUN_ARGS="--prefix /opt/openmpi".
These variables, when set here, are exported to every rank with mpirun -x: NCCL_*, UCX_*,
MEGABATCH_*, TORCH_*, OMP_NUM_THREADS, PATH, LD_LIBRARY_PATH. Set e.g. NCCL_DEBUG=INFO,
NCCL_IB_GID_INDEX=3 (RoCE), or MEGABATCH_LOG_ALL_RANKS=1 before calling the script.
Runs as root (containers) get --allow-run-as-root; no one else does.
A host behind a cut link must not leave mpirun waiting: the daemons' TCP keepalive is set from
dist.timeout_s (T), so a link silent for about T/2 ends the job; oob_tcp_keepalive_* settings of
your own in MB_MPIRUN_ARGS replace it (docs/operations.md, "Several nodes").

The binary: $MEGABATCH_BIN, else <repo>/build/megabatch, else megabatch on PATH; the same path
must hold it on every host.
Exit codes and stops are as for launch/train-node.sh: SIGTERM, Ctrl-C or SIGUSR1 to this script
checkpoints every rank within seconds and exits 75 (rerun the same command to resume); a
second Ctrl-C ends the job at once.

Examples:
  launch/train-multinode.sh --hostfile hosts --ib-hca mlx5_0 --ifname ib0 configs/gpt2-small.yaml
  launch/train-multinode.sh --hostfile hosts --net tcp --ifname eth0 configs/lstm-multitf.yaml
  printf 'localhost\nlocalhost\n' > hosts
  launch/train-multinode.sh --hostfile hosts --net tcp --cpu configs/demo.yaml
EOF
}

hostfile="" nproc_arg="" cpus_per_rank="" bind=core net=ib ifname="" ib_hca="" cpu=0 dry_run=0
MB_ELASTIC_MAX_RESTARTS=0 MB_ELASTIC_MIN_HOSTS=1 MB_ELASTIC_HOST_WAIT=300
MB_ELASTIC_PROBE_TIMEOUT=10 MB_ELASTIC_PROBE_EVERY=10 MB_ELASTIC_SCALE_UP=0
need() { [[ $2 -ge 2 ]] || mb_die 2 "$1 needs a value" "see launch/train-multinode.sh --help"; }
count() {  # count OPTION VALUE MINIMUM: VALUE, a whole number of at least MINIMUM
  [[ $2 =~ ^[0-9]+$ && $2 -ge $3 ]] || mb_die 2 "$1 $2: expected a whole number of at least $3"
  echo "$2"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --hostfile) need "$1" $#; hostfile=$2; shift 2 ;;
    --hostfile=*) hostfile=${1#*=}; shift ;;
    -n|--nproc|-np) need "$1" $#; nproc_arg=$2; shift 2 ;;
    --nproc=*) nproc_arg=${1#*=}; shift ;;
    --cpus-per-rank) need "$1" $#; cpus_per_rank=$2; shift 2 ;;
    --cpus-per-rank=*) cpus_per_rank=${1#*=}; shift ;;
    --bind) need "$1" $#; bind=$2; shift 2 ;;
    --bind=*) bind=${1#*=}; shift ;;
    --net) need "$1" $#; net=$2; shift 2 ;;
    --net=*) net=${1#*=}; shift ;;
    --ifname) need "$1" $#; ifname=$2; shift 2 ;;
    --ifname=*) ifname=${1#*=}; shift ;;
    --ib-hca) need "$1" $#; ib_hca=$2; shift 2 ;;
    --ib-hca=*) ib_hca=${1#*=}; shift ;;
    --cpu) cpu=1; shift ;;
    --max-restarts) need "$1" $#; MB_ELASTIC_MAX_RESTARTS=$(count "$1" "$2" 0); shift 2 ;;
    --min-hosts) need "$1" $#; MB_ELASTIC_MIN_HOSTS=$(count "$1" "$2" 1); shift 2 ;;
    --host-wait) need "$1" $#; MB_ELASTIC_HOST_WAIT=$(count "$1" "$2" 0); shift 2 ;;
    --probe-timeout) need "$1" $#; MB_ELASTIC_PROBE_TIMEOUT=$(count "$1" "$2" 1); shift 2 ;;
    --probe-every) need "$1" $#; MB_ELASTIC_PROBE_EVERY=$(count "$1" "$2" 1); shift 2 ;;
    --scale-up) MB_ELASTIC_SCALE_UP=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) mb_die 2 "unknown option $1" "see launch/train-multinode.sh --help" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || mb_die 2 "no CONFIG given" "usage: launch/train-multinode.sh --hostfile FILE [options] CONFIG [key=value ...]"
config=$1
shift
[[ -n $hostfile ]] || mb_die 2 "--hostfile is required" "write one line per node: 'node01 slots=8'"
[[ -r $hostfile ]] || mb_die 2 "hostfile $hostfile cannot be read"
[[ $bind == core || $bind == none ]] || mb_die 2 "--bind $bind: expected core or none"
[[ $net == ib || $net == tcp ]] || mb_die 2 "--net $net: expected ib or tcp"

# Slots per host as Open MPI counts them (mb_hostfile_hosts, elastic.sh): the total, the most of
# one host, and the number of hosts.
read -r total_slots max_slots hosts < <(mb_hostfile_hosts "$hostfile" |
  awk '{ t += $2; if ($2 > m) m = $2; h++ } END { print t + 0, m + 0, h + 0 }')
[[ $total_slots -gt 0 ]] || mb_die 2 "hostfile $hostfile names no host" "write one line per node: 'node01 slots=8'"
np=${nproc_arg:-$total_slots}
[[ $np =~ ^[1-9][0-9]*$ ]] || mb_die 2 "--nproc $np is not a positive number"
if [[ -n $cpus_per_rank ]]; then
  [[ $cpus_per_rank =~ ^[1-9][0-9]*$ ]] || mb_die 2 "--cpus-per-rank $cpus_per_rank is not a positive number"
else
  cpus_per_rank=$(( $(mb_count_cores) / max_slots ))
  [[ $cpus_per_rank -ge 1 ]] || cpus_per_rank=1
fi

mpi=("${MB_ROOT_FLAGS[@]}")
if [[ $bind == core ]]; then
  mpi+=(--map-by "slot:PE=$cpus_per_rank" --bind-to core)
else
  mpi+=(--map-by slot --bind-to none)
fi
export OMP_NUM_THREADS=$cpus_per_rank

# Network. InfiniBand: MPI's own traffic (small control messages) over UCX; NCCL finds the
# HCAs itself, NCCL_IB_HCA pins the ones to use. TCP: both over sockets.
if [[ $net == ib ]]; then
  mpi+=(--mca pml ucx --mca btl '^openib')
else
  mpi+=(--mca pml ob1 --mca btl self,vader,tcp --mca osc '^ucx')
  export NCCL_IB_DISABLE=1
fi
if [[ -n $ifname ]]; then
  export NCCL_SOCKET_IFNAME=$ifname
  mpi+=(--mca oob_tcp_if_include "$ifname")
  [[ $net == tcp ]] && mpi+=(--mca btl_tcp_if_include "$ifname")
fi
if [[ -n $ib_hca ]]; then
  export NCCL_IB_HCA=$ib_hca
  ucx=""
  IFS=, read -ra adapters <<<"$ib_hca"
  for a in "${adapters[@]}"; do ucx+="${ucx:+,}${a%%:*}:1"; done
  export UCX_NET_DEVICES=$ucx
fi

# Remote ranks get only what mpirun is told to pass.
for name in $(compgen -e | grep -E '^(NCCL_|UCX_|MEGABATCH_|TORCH_)' || true) OMP_NUM_THREADS PATH LD_LIBRARY_PATH; do
  [[ -n ${!name+set} ]] && mpi+=(-x "$name")
done
bin=$(mb_find_bin)
# A link cut must not leave mpirun waiting for a daemon it cannot reach: see common.sh.
# shellcheck disable=SC2207  # a list of words on purpose
mpi+=($(mb_daemon_keepalive_args "${MB_MPIRUN_ARGS:-}" "$bin" "$config" "$@"))
# shellcheck disable=SC2206  # MB_MPIRUN_ARGS is a list of words on purpose
[[ -n ${MB_MPIRUN_ARGS:-} ]] && mpi+=(${MB_MPIRUN_ARGS})
job=("$bin" train --config "$config")
[[ $cpu == 1 ]] && job+=(train.device=cpu)
job+=("$@")
cmd=(mpirun -np "$np" --hostfile "$hostfile" "${mpi[@]}" "${job[@]}")

if [[ $dry_run == 1 ]]; then
  echo "# $hosts host(s), $total_slots slot(s), $np rank(s), $cpus_per_rank core(s) per rank"
  ((MB_ELASTIC_MAX_RESTARTS == 0)) ||
    echo "# restarts: up to $MB_ELASTIC_MAX_RESTARTS on the hosts that answer (at least" \
      "$MB_ELASTIC_MIN_HOSTS), probes of $MB_ELASTIC_PROBE_TIMEOUT s every $MB_ELASTIC_PROBE_EVERY s," \
      "scale-up $( ((MB_ELASTIC_SCALE_UP == 1)) && echo on || echo off)"
  for name in $(compgen -e | grep -E '^(NCCL_|UCX_|OMP_NUM_THREADS$)' || true); do echo "$name=${!name}"; done
  mb_show_command "${cmd[@]}"
  exit 0
fi
# Note [Stop signals in the launchers] (common.sh): SIGTERM, SIGINT and SIGHUP reach mpirun as
# SIGUSR1, so the job checkpoints and this script exits 75.
if ((MB_ELASTIC_MAX_RESTARTS > 0 || MB_ELASTIC_SCALE_UP == 1)); then
  # Note [Restarts after a lost host] (elastic.sh); the run directory names where it resumes.
  run_dir=$("$bin" "${job[@]:1}" --print-config 2>/dev/null |
    awk '/^run:/ { r = 1; next } /^[^ ]/ { r = 0 } r && $1 == "dir:" { sub(/^[^:]*: */, ""); print; exit }')
  mb_elastic_run "$hostfile" "$nproc_arg" "${run_dir:-runs/default}" "${mpi[@]}" -- "${job[@]}"
else
  mb_run_job "${cmd[@]}"
fi
exit "$MB_JOB_STATUS"
