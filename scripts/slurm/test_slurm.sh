#!/usr/bin/env bash
# Exercises scripts/slurm/train.sbatch on a real one-machine SLURM started by hand (munged,
# slurmctld, slurmd with a generated slurm.conf in a scratch directory). Needs root and Debian's
# apt-get (slurm-wlm and munge are installed when missing); not part of ctest.
#
#   sudo scripts/slurm/test_slurm.sh [LOG_DIR]     LOG_DIR keeps the job logs and summary.txt
#
# Checks, in both launch modes (srun --mpi=pmix, and SHARDREC_LAUNCH=mpirun):
#   - a 2-rank quickstart job COMPLETES, its metrics.jsonl has an eval and the done record, and
#     its final AUC equals a plain `mpirun -np 2` run of the same command;
#   - a job sent USR1 mid-run (as --signal=B:USR1@120 does before the time limit) saves its
#     checkpoint, and the same sbatch line with the same SHARDREC_OUT resumes and finishes with
#     the AUC of an uninterrupted run;
#   - a rank that exits (SHARDREC_FAULT_INJECT=1:5:exit) ends the job FAILED within a minute.
# Everything started is stopped by PID on exit and the scratch directory removed.
# Environment: BUILD_DIR (default build), SLURM_TASK_PLUGIN (default task/affinity).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
build_dir=${BUILD_DIR:-build}
bin="$repo/$build_dir/shardrec"
log_dir=${1:-}
config=configs/quickstart.yaml

step() { echo "=== $*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root: it installs packages and starts the SLURM daemons"

step "packages"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
fi
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 600 /etc/munge/munge.key
fi

step "build ($build_dir)"
if [ ! -x "$bin" ]; then
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSHARDREC_CUDA="${SHARDREC_CUDA:-AUTO}"
    cmake --build "$build_dir" -j "$(nproc)" --target shardrec
fi

scratch=$(mktemp -d /tmp/shardrec-slurm.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    set +e
    if command -v squeue >/dev/null && [ -n "${SLURM_CONF:-}" ]; then
        scancel --quiet --user=root 2>/dev/null
    fi
    # Newest first: slurmd, slurmctld, then munged.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[i]}" 2>/dev/null && wait "${pids[i]}" 2>/dev/null
    done
    if [ -n "$log_dir" ] && [ $rc -ne 0 ]; then
        mkdir -p "$log_dir"
        cp "$scratch"/*.log "$scratch"/*.stderr "$scratch"/*.out "$log_dir"/ 2>/dev/null
    fi
    rm -rf "$scratch"
    exit $rc
}
trap cleanup EXIT

step "munged"
if echo | munge 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "a munged already answers on the default socket: using it"
else
    mkdir -p /run/munge
    chown munge:munge /run/munge
    # -F: foreground, so that $! is its PID; --force: root may run it.
    munged -F --force --log-file="$scratch/munged.log" --pid-file="$scratch/munged.pid" \
        >"$scratch/munged.stderr" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do
        echo | munge 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.2
    done
    echo | munge | unmunge >/dev/null || fail "munged does not answer (see $scratch/munged.log)"
fi

step "slurm.conf"
host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$scratch/state" "$scratch/spool"
export SLURM_CONF="$scratch/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=shardrec-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/slurmctld.log
SlurmdLogFile=$scratch/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=${SLURM_TASK_PLUGIN:-task/affinity}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Finished jobs stay in scontrol for the checks below (there is no slurmdbd for sacct).
MinJobAge=3600
KillWait=10
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
cat "$SLURM_CONF"

step "slurmctld, slurmd"
# Foreground (-D), so that $! is the daemon; their logs are in the scratch directory.
slurmctld -D -i -f "$SLURM_CONF" >"$scratch/slurmctld.stderr" 2>&1 &
pids+=($!)
sleep 1
slurmd -D -f "$SLURM_CONF" -N "$host" >"$scratch/slurmd.stderr" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 1
done
sinfo
[ "${state:-}" = idle ] || fail "node $host is '${state:-unknown}', not idle (see $scratch/slurm*.log)"
echo "srun --mpi=list:"
srun --mpi=list 2>&1 | sed 's/^/  /'

# Open MPI refuses root without these; real sites run as users and need neither.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SHARDREC_BIN="$bin"

job_field() { # job_field JOBID FIELD: FIELD=value of `scontrol show job`
    scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}
final_auc() { # the AUC of the last eval line of a metrics.jsonl
    grep '"kind":"eval"' "$1" | tail -n1 | sed 's/.*"auc":\([^,]*\),.*/\1/'
}
# submit NAME [sbatch options...] -- [train args...]: sbatch --wait; prints the job id; the job's
# log is $scratch/NAME.out and its run directory $scratch/runs/NAME.
submit() {
    local name=$1
    shift
    local opts=()
    while [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    SHARDREC_OUT="$scratch/runs/$name" sbatch --parsable --wait --nodes=1 --ntasks-per-node=2 \
        --output="$scratch/$name.out" "${opts[@]}" scripts/slurm/train.sbatch "$config" "$@"
}
plain_run() { # plain_run OUT [train args...]: the same training through mpirun -np 2
    local out=$1
    shift
    mpirun --oversubscribe -np 2 "$bin" train "$config" --out "$out" "$@" >"$out.log" 2>&1 ||
        fail "plain mpirun run failed: $(tail -n 5 "$out.log")"
}
summary=()

short=(--set train.steps=50 --set train.checkpoint_every=25)
long=(--set train.steps=3000 --set train.checkpoint_every=100 --set train.log_every=10)
step "plain mpirun -np 2 references"
plain_run "$scratch/plain-short" "${short[@]}"
plain_run "$scratch/plain-long" "${long[@]}"
auc_short=$(final_auc "$scratch/plain-short/metrics.jsonl")
auc_long=$(final_auc "$scratch/plain-long/metrics.jsonl")
echo "AUC 50 steps $auc_short, 3000 steps $auc_long"

for launch in srun mpirun; do
    export SHARDREC_LAUNCH=$launch

    step "$launch: 50 steps"
    rc=0
    job=$(submit "$launch-short" -- "${short[@]}") || rc=$?
    job=${job%%;*}
    state=$(job_field "$job" JobState)
    echo "job $job: $state, sbatch --wait exit $rc"
    [ "$rc" = 0 ] && [ "$state" = COMPLETED ] || fail "$launch job $job: $state (exit $rc), see $scratch/$launch-short.out"
    metrics="$scratch/runs/$launch-short/metrics.jsonl"
    grep -q '"kind":"done","steps":50' "$metrics" || fail "$metrics has no done record for 50 steps"
    auc=$(final_auc "$metrics")
    [ -n "$auc" ] || fail "$metrics has no eval line"
    [ "$auc" = "$auc_short" ] || fail "$launch AUC $auc differs from plain mpirun's $auc_short"
    summary+=("$launch 50 steps: job $job COMPLETED, AUC $auc = plain mpirun -np 2")

    step "$launch: stopped mid-run, resubmitted"
    name="$launch-stop"
    rc=0
    submit "$name" -- "${long[@]}" >"$scratch/$name.jobid" &
    sbatch_pid=$!
    # Signal once the run has saved a checkpoint, so that the stop saves a later step.
    for _ in $(seq 120); do
        [ -d "$scratch/runs/$name/checkpoints/step-00000200" ] && break
        sleep 0.5
    done
    job=$(squeue -h -n shardrec -o %i | head -n1)
    [ -n "$job" ] || fail "$launch: no running job to stop"
    # What --signal=B:USR1@120 sends before the time limit: USR1 to the batch step, which is the
    # launcher (the recipe execs it); srun and mpirun pass it on to the ranks.
    signal=USR1
    scancel --signal=USR1 --batch "$job"
    wait $sbatch_pid || rc=$?
    state=$(job_field "$job" JobState)
    echo "job $job after SIG$signal: $state, sbatch --wait exit $rc"
    [ "$rc" != 0 ] || fail "$launch: job $job ended 0 after SIG$signal (did it stop early?)"
    grep -q "SIG$signal (signal [0-9]*) ended the run at train step" "$scratch/$name.out" ||
        fail "$launch: $scratch/$name.out does not say SIG$signal ended the run"
    saved=$(ls "$scratch/runs/$name/checkpoints" | grep '^step-' | sort | tail -n1)
    [ -n "$saved" ] || fail "$launch: no checkpoint after the stop"
    grep -q '"kind":"done"' "$scratch/runs/$name/metrics.jsonl" &&
        fail "$launch: the stopped run has a done record"
    echo "stopped at: $(grep -o "ended the run at train step [0-9]*" "$scratch/$name.out" | head -n1); newest checkpoint $saved"
    rc=0
    job2=$(submit "$name" -- "${long[@]}") || rc=$?
    job2=${job2%%;*}
    state=$(job_field "$job2" JobState)
    echo "job $job2 (resubmitted): $state, sbatch --wait exit $rc"
    [ "$rc" = 0 ] && [ "$state" = COMPLETED ] || fail "$launch: resubmitted job $job2: $state (exit $rc)"
    grep -q "loaded checkpoint .*/$saved: " "$scratch/$name.out" ||
        fail "$launch: the resubmitted job did not resume from $saved"
    metrics="$scratch/runs/$name/metrics.jsonl"
    grep -q '"kind":"done","steps":3000' "$metrics" || fail "$metrics has no done record for 3000 steps"
    auc=$(final_auc "$metrics")
    [ "$auc" = "$auc_long" ] || fail "$launch resumed AUC $auc differs from the uninterrupted $auc_long"
    summary+=("$launch SIG$signal: job $job FAILED at ${saved}, resubmitted job $job2 resumed, COMPLETED, AUC $auc = uninterrupted 3000 steps")

    step "$launch: rank 1 exits at step 5"
    rc=0
    job=$(submit "$launch-fault" --export=ALL,SHARDREC_FAULT_INJECT=1:5:exit -- "${long[@]}") || rc=$?
    job=${job%%;*}
    # From the job's start to its end (sbatch --wait itself polls at growing intervals).
    took=$(($(date -d "$(job_field "$job" EndTime)" +%s) - $(date -d "$(job_field "$job" StartTime)" +%s)))
    state=$(job_field "$job" JobState)
    echo "job $job: $state, sbatch --wait exit $rc, ${took} s"
    [ "$rc" != 0 ] && [ "$state" = FAILED ] || fail "$launch: faulty job $job: $state (exit $rc)"
    [ "$took" -lt 60 ] || fail "$launch: faulty job $job took $took s to fail"
    summary+=("$launch rank 1 exit: job $job FAILED in $took s")
done

step "summary"
printf '%s\n' "${summary[@]}"
if [ -n "$log_dir" ]; then
    mkdir -p "$log_dir"
    cp "$scratch"/*.out "$log_dir"/
    {
        echo "commit $(git describe --always --dirty)"
        echo "$(sbatch --version), $(mpirun --version | head -n1), $(uname -sr)"
        echo "srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n' ' ')"
        printf '%s\n' "${summary[@]}"
    } >"$log_dir/summary.txt"
fi
echo "scripts/slurm/test_slurm.sh: all checks passed"
