#!/usr/bin/env bash
# Exercises scripts/slurm/train.sbatch on a real one-machine SLURM started by hand (munged,
# slurmctld, slurmd with a generated slurm.conf in a scratch directory). Needs root and Debian's
# apt-get (slurm-wlm and munge are installed when missing); not part of ctest.
#
#   sudo scripts/slurm/test_slurm.sh [--time-limit] [LOG_DIR]   LOG_DIR keeps the job logs and
#                                                                 summary.txt
#
# The cluster is two nodes on this machine: two slurmd (NodeName=<host> and n2, one port, spool
# and TmpFS each, so that their PMIx servers do not collide). Checks, in both launch modes (srun
# --mpi=pmix, and SHARDREC_LAUNCH=mpirun):
#   - short: a 2-rank quickstart job COMPLETES, its metrics.jsonl has an eval and the done
#     record, and its final AUC equals a plain `mpirun -np 2` run of the same command;
#   - stop: a job sent USR1 mid-run (as --signal=B:USR1@120 does before the time limit), and one
#     sent `scancel --signal=TERM --batch` (a preemption signal to the batch shell), saves a
#     checkpoint after the last periodic one, and the same sbatch line with the same SHARDREC_OUT
#     resumes it and finishes with the AUC of an uninterrupted run;
#   - requeue: `scontrol requeue` mid-run (SIGTERM to every process of the job, then SIGKILL
#     after KillWait) runs the job again, which resumes from its own newest checkpoint, keeps the
#     first attempt's log (--open-mode=append) and COMPLETES with the uninterrupted AUC;
#   - nodes: a --nodes=2 --ntasks-per-node=1 job COMPLETES with the AUC of `mpirun -np 2`; the
#     start line's node count is recorded;
#   - fault: a rank that exits (SHARDREC_FAULT_INJECT=1:5:exit) ends the job FAILED within a minute;
#   - time limit (--time-limit, about 5 minutes more): a slowed run with --time=1 and
#     --signal=B:USR1@30 saves before its limit, and the resubmitted job resumes and finishes with
#     the AUC of an uninterrupted run.
# Everything started is stopped by PID on exit and the scratch directory removed.
# Environment: BUILD_DIR (default build), SLURM_TASK_PLUGIN (default task/affinity), CHECKS (a
# subset of "short stop requeue nodes fault", default all).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
build_dir=${BUILD_DIR:-build}
bin="$repo/$build_dir/shardrec"
time_limit=0
if [ "${1:-}" = --time-limit ]; then
    time_limit=1
    shift
fi
log_dir=${1:-}
checks=" ${CHECKS:-short stop requeue nodes fault} "
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
    # An sbatch --wait still in the background.
    [ -z "${sbatch_pid:-}" ] || kill "$sbatch_pid" 2>/dev/null
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
mkdir -p "$scratch/state" "$scratch/spool-$host" "$scratch/spool-n2" "$scratch/tmp-$host" "$scratch/tmp-n2"
export SLURM_CONF="$scratch/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=shardrec-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$scratch/state
# Two slurmd on this host: %n is the node's name.
SlurmdSpoolDir=$scratch/spool-%n
TmpFS=$scratch/tmp-%n
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd-%n.pid
SlurmctldLogFile=$scratch/slurmctld.log
SlurmdLogFile=$scratch/slurmd-%n.log
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
# n2 is a second slurmd on this host (its own port); one-node jobs go to $host (lower weight).
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus Weight=1 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=6819 CPUs=$cpus Weight=2 State=UNKNOWN
PartitionName=debug Nodes=$host,n2 Default=YES MaxTime=INFINITE State=UP
EOF
cat "$SLURM_CONF"

step "slurmctld, slurmd"
# Foreground (-D), so that $! is the daemon; their logs are in the scratch directory.
slurmctld -D -i -f "$SLURM_CONF" >"$scratch/slurmctld.stderr" 2>&1 &
pids+=($!)
sleep 1
for node in "$host" n2; do
    slurmd -D -f "$SLURM_CONF" -N "$node" >"$scratch/slurmd-$node.stderr" 2>&1 &
    pids+=($!)
done
for _ in $(seq 60); do
    state=$(sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$state" = "idle " ] && break
    sleep 1
done
sinfo
[ "${state:-}" = "idle " ] || fail "nodes $host and n2 are '${state:-unknown}', not idle (see $scratch/slurm*.log)"
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
wait_for_checkpoint() { # wait_for_checkpoint NAME STEP: until runs/NAME has that checkpoint
    local dir
    dir=$scratch/runs/$1/checkpoints/$(printf 'step-%08d' "$2")
    for _ in $(seq 600); do
        [ -d "$dir" ] && return 0
        sleep 0.5
    done
    fail "no $dir after 300 s"
}
running_job() { # the id of the job running runs/NAME (its SHARDREC_OUT is in its log's first line)
    local job
    for job in $(squeue -h -t RUNNING -o %i); do
        [ "$(job_field "$job" StdOut)" = "$scratch/$1.out" ] && echo "$job" && return 0
    done
    fail "no running job writes $scratch/$1.out"
}
newest_checkpoint() { # the newest step-* of runs/NAME
    ls "$scratch/runs/$1/checkpoints" | grep '^step-' | sort | tail -n1
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
# Slowed for a one-minute time limit: batches 8 times larger, about a minute or two here.
slow=(--set train.steps=3000 --set data.batch_size=2048 --set train.checkpoint_every=500
    --set train.log_every=50)
step "plain mpirun -np 2 references"
plain_run "$scratch/plain-short" "${short[@]}"
plain_run "$scratch/plain-long" "${long[@]}"
auc_short=$(final_auc "$scratch/plain-short/metrics.jsonl")
auc_long=$(final_auc "$scratch/plain-long/metrics.jsonl")
echo "AUC 50 steps $auc_short, 3000 steps $auc_long"
if [ $time_limit = 1 ]; then
    start=$(date +%s)
    plain_run "$scratch/plain-slow" "${slow[@]}"
    auc_slow=$(final_auc "$scratch/plain-slow/metrics.jsonl")
    echo "AUC slowed 3000 steps $auc_slow ($(($(date +%s) - start)) s uninterrupted)"
fi

# check_resumed NAME JOB2 SAVED AUC STEPS: job JOB2 COMPLETED runs/NAME from checkpoint SAVED
# with the final AUC of the uninterrupted run.
check_resumed() {
    local name=$1 job2=$2 saved=$3 want=$4 steps=$5 state metrics auc
    state=$(job_field "$job2" JobState)
    [ "$state" = COMPLETED ] || fail "$name: job $job2 is $state, not COMPLETED (see $scratch/$name.out)"
    grep -q "loaded checkpoint .*/$saved: " "$scratch/$name.out" ||
        fail "$name: job $job2 did not resume from $saved"
    metrics="$scratch/runs/$name/metrics.jsonl"
    grep -q "\"kind\":\"done\",\"steps\":$steps" "$metrics" || fail "$metrics has no done record for $steps steps"
    auc=$(final_auc "$metrics")
    [ "$auc" = "$want" ] || fail "$name: resumed AUC $auc differs from the uninterrupted $want"
}

for launch in srun mpirun; do
    export SHARDREC_LAUNCH=$launch

    if [[ $checks == *" short "* ]]; then
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
    fi

    # USR1 is what --signal=B:USR1@120 sends before the time limit, TERM what
    # `scancel --signal=TERM --batch` (a preemption notice) sends: both to the batch shell only,
    # which passes the stop on to the ranks (as SIGUSR1: srun and mpirun forward that one as it is).
    for signal in $([[ $checks == *" stop "* ]] && echo USR1 TERM); do
        step "$launch: SIG$signal to the batch shell mid-run, resubmitted"
        name="$launch-stop-$signal"
        rc=0
        submit "$name" -- "${long[@]}" >"$scratch/$name.jobid" &
        sbatch_pid=$!
        # Signal once the run has saved a checkpoint, so that the stop saves a later step.
        wait_for_checkpoint "$name" 200
        job=$(running_job "$name")
        scancel --signal="$signal" --batch "$job"
        wait $sbatch_pid || rc=$?
        state=$(job_field "$job" JobState)
        echo "job $job after SIG$signal: $state, sbatch --wait exit $rc"
        [ "$rc" != 0 ] || fail "$launch: job $job ended 0 after SIG$signal (did it stop early?)"
        grep -q "train.sbatch: SIG$signal received" "$scratch/$name.out" ||
            fail "$launch: the batch shell of job $job did not get SIG$signal"
        grep -q "SIGUSR1 (signal 10) ended the run at train step" "$scratch/$name.out" ||
            fail "$launch: $scratch/$name.out does not say the ranks stopped"
        stopped=$(grep -o "ended the run at train step [0-9]*" "$scratch/$name.out" | head -n1 | grep -o '[0-9]*$')
        saved=$(newest_checkpoint "$name")
        [ "$saved" = "$(printf 'step-%08d' $((stopped - 1)))" ] ||
            fail "$launch: stopped before step $stopped but the newest checkpoint is '$saved'"
        grep -q '"kind":"done"' "$scratch/runs/$name/metrics.jsonl" &&
            fail "$launch: the stopped run has a done record"
        echo "stopped before step $stopped; newest checkpoint $saved"
        rc=0
        job2=$(submit "$name" -- "${long[@]}") || rc=$?
        job2=${job2%%;*}
        echo "job $job2 (resubmitted): $(job_field "$job2" JobState), sbatch --wait exit $rc"
        check_resumed "$name" "$job2" "$saved" "$auc_long" 3000
        summary+=("$launch SIG$signal to the batch shell: job $job $state after saving $saved, resubmitted job $job2 resumed, COMPLETED, AUC $auc_long = uninterrupted 3000 steps")
    done

    if [[ $checks == *" requeue "* ]]; then
        step "$launch: scontrol requeue mid-run"
        name="$launch-requeue"
        rc=0
        submit "$name" -- "${long[@]}" >"$scratch/$name.jobid" &
        sbatch_pid=$!
        wait_for_checkpoint "$name" 200
        job=$(running_job "$name")
        scontrol requeue "$job"
        # SLURM holds a requeued batch job back (its begin time) before it runs it again; the
        # test does not wait for that.
        for _ in $(seq 100); do
            [ "$(job_field "$job" JobState)" = PENDING ] && break
            sleep 0.2
        done
        echo "job $job requeued: $(job_field "$job" JobState), $(job_field "$job" Reason), restarts $(job_field "$job" Restarts)"
        saved=$(newest_checkpoint "$name")
        scontrol update JobId="$job" StartTime=now
        wait $sbatch_pid || rc=$?
        echo "job $job: $(job_field "$job" JobState), restarts $(job_field "$job" Restarts), sbatch --wait exit $rc"
        [ "$(job_field "$job" Restarts)" = 1 ] || fail "$launch: job $job did not run again"
        [ "$(grep -c "^shardrec: " "$scratch/$name.out")" = 2 ] ||
            fail "$launch: $scratch/$name.out does not hold both attempts"
        stop_line=$(grep -o "SIG[A-Z0-9]* (signal [0-9]*) ended the run at train step [0-9]*" "$scratch/$name.out" | head -n1 || true)
        check_resumed "$name" "$job" "$saved" "$auc_long" 3000
        summary+=("$launch requeue: job $job requeued (${stop_line:-no stop message in the log}), ran again from $saved, COMPLETED, AUC $auc_long = uninterrupted 3000 steps, both attempts in one log")
    fi

    if [ $time_limit = 1 ]; then
        step "$launch: --time=1 --signal=B:USR1@30, slowed run"
        name="$launch-timelimit"
        rc=0
        job=$(submit "$name" --time=1 --signal=B:USR1@30 -- "${slow[@]}") || rc=$?
        job=${job%%;*}
        state=$(job_field "$job" JobState)
        took=$(($(date -d "$(job_field "$job" EndTime)" +%s) - $(date -d "$(job_field "$job" StartTime)" +%s)))
        echo "job $job: $state after $took s, sbatch --wait exit $rc"
        grep -q "train.sbatch: SIGUSR1 received" "$scratch/$name.out" ||
            fail "$launch: job $job's batch shell got no SIGUSR1 before its limit ($state)"
        at=$(grep -o "ended the run at train step [0-9]*" "$scratch/$name.out" | head -n1 | grep -o '[0-9]*$' || true)
        [ -n "$at" ] || fail "$launch: job $job did not stop before its limit ($state)"
        saved=$(newest_checkpoint "$name")
        [ "$saved" = "$(printf 'step-%08d' $((at - 1)))" ] || fail "$launch: stopped before step $at but saved '$saved'"
        rc=0
        job2=$(submit "$name" -- "${slow[@]}") || rc=$?
        job2=${job2%%;*}
        echo "job $job2 (resubmitted, no limit): $(job_field "$job2" JobState), sbatch --wait exit $rc"
        check_resumed "$name" "$job2" "$saved" "$auc_slow" 3000
        summary+=("$launch time limit 1 min, B:USR1@30: job $job $state after $took s having saved $saved, resubmitted job $job2 resumed, COMPLETED, AUC $auc_slow = uninterrupted")
    fi

    if [[ $checks == *" nodes "* ]]; then
        step "$launch: --nodes=2 --ntasks-per-node=1"
        name="$launch-nodes2"
        rc=0
        job=$(submit "$name" --nodes=2 --ntasks-per-node=1 -- "${short[@]}") || rc=$?
        job=${job%%;*}
        state=$(job_field "$job" JobState)
        echo "job $job on $(job_field "$job" NodeList): $state, sbatch --wait exit $rc"
        [ "$rc" = 0 ] && [ "$state" = COMPLETED ] || fail "$launch: 2-node job $job: $state (exit $rc), see $scratch/$name.out"
        [ "$(job_field "$job" NodeList)" = "n2,$host" ] || [ "$(job_field "$job" NodeList)" = "$host,n2" ] ||
            fail "$launch: job $job ran on $(job_field "$job" NodeList)"
        nodes=$(grep -o "on 2 rank(s), [0-9]* node(s)" "$scratch/$name.out" | head -n1)
        echo "start line: $nodes"
        auc=$(final_auc "$scratch/runs/$name/metrics.jsonl")
        [ "$auc" = "$auc_short" ] || fail "$launch: 2-node AUC $auc differs from plain mpirun -np 2's $auc_short"
        summary+=("$launch 2 nodes x 1 rank: job $job COMPLETED on $(job_field "$job" NodeList), start line '$nodes', AUC $auc = plain mpirun -np 2")
    fi

    if [[ $checks == *" fault "* ]]; then
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
    fi
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
