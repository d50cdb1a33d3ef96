#!/usr/bin/env bash
# A sweep across emulated hosts (scripts/multihost/hosts.sh: network namespaces, TCP between
# them): hosts x ranks per host x comm.hierarchical false|true x comm.qcomms fp32|fp16|fp8, each
# point a `shardrec bench` under mpirun over the hosts. Per point: the step time (bench's median),
# the pooled bytes sent to other nodes per step (bench's own count, summed over ranks), and the
# bytes on each host's link per step, read from the veth's tx and rx bytes inside the host's
# namespace (/proc/net/dev): the difference of a run of 2S and one of S timed steps, divided by S
# (start-up and wire-up traffic cancel). busbw of each collective of the step (nccl-tests'
# definitions, see below): the ids' all-to-alls (the input dists), the pooled exchange (the
# output dists, forward and backward) and the dense gradients' all-reduce, each over the step
# time (a lower bound) and, for the blocking two, over their own time (the S-step run is profiled:
# the output_dist and all_reduce regions). The pooled bytes out of each host's link per second and
# all that the link sent per second are set against SR_SWEEP_RATE.
#   scripts/multihost/sweep.sh [OUT_DIR]      (root; OUT_DIR: bench/results/multihost-sweep-DATE)
# Environment:
#   SR_SWEEP_HOSTS  host counts (default "1 2"; "1 2 4" takes about twice as long on 2 cores)
#   SR_SWEEP_RPP    ranks per host (default "1 2")
#   SR_SWEEP_QCOMMS precisions (default "fp32 fp16 fp8")
#   SR_SWEEP_STEPS  S (default 20)   SR_SWEEP_CONFIG (default configs/quickstart.yaml)
#   SR_SWEEP_SET    extra --set overrides (default: every table row_wise, batch 512: comm-heavy)
#   SR_SWEEP_RATE   a tbf rate on every host's link (its egress, so each direction), e.g. 100mbit
#                   (default none: veth speed); busbw_mbit_s and link_tx_mbit_s set against it
#   BIN             the binary (default build/shardrec)
# Writes sweep.csv, table.txt (and sweep.png with gnuplot where installed), provenance.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/provenance.sh
out=${1:-bench/results/multihost-sweep-$(date -u +%Y%m%d)}
bin=$(realpath "${BIN:-build/shardrec}")
config=$(realpath "${SR_SWEEP_CONFIG:-configs/quickstart.yaml}")
steps=${SR_SWEEP_STEPS:-20}
rate=${SR_SWEEP_RATE:-}
extra=${SR_SWEEP_SET:-"sharding.sharding_type=row_wise sharding.tables=[] data.batch_size=512"}
hosts_sh=$(realpath scripts/multihost/hosts.sh)
agent=$(realpath scripts/multihost/rsh_agent.sh)
[ -x "$bin" ] || { echo "sweep.sh: no binary at $bin (build shardrec first)" >&2; exit 1; }
bash "$hosts_sh" check || exit $?
mkdir -p "$out"
out=$(realpath "$out")
save_provenance "$out"
{
    echo "config: $config"
    echo "overrides: $extra"
    echo "steps: $steps and $((2 * steps)) (link bytes: the difference)"
    echo "rate: ${rate:-none (veth)}"
    echo "cores: $(nproc)"
} >>"$out/provenance.txt"
trap 'bash "$hosts_sh" down' EXIT

link_bytes() {  # HOST -> "rx tx" bytes of its eth0 (/proc/net/dev: the namespace's own; /sys
    # would show the root namespace's, as nsenter keeps the mount namespace). The ':' becomes a
    # space first: rx bytes of 9 digits or more follow "eth0:" without one.
    bash "$hosts_sh" exec "sr-h$1" sed 's/:/ /' /proc/net/dev | awk '$1 == "eth0" {print $2, $10}'
}

# One bench run: prints "<rx+tx bytes> <tx bytes>", summed over the hosts' links.
run_bench() {  # ... [--profile]
    local hosts=$1 rpp=$2 hier=$3 q=$4 n=$5 json=$6 before=0 after=0 tx0=0 tx1=0 k rx tx sets=()
    local profile=("${@:7}")
    for s in $extra comm.hierarchical="$hier" comm.qcomms.forward="$q" comm.qcomms.backward="$q" \
        train.log_every=1000000; do
        sets+=(--set "$s")
    done
    # --warmup 16: bench warms up over each of its min(warmup + steps, 16) batches, so a smaller
    # warmup would differ between the S- and the 2S-step run and not cancel in the link bytes.
    for k in $(seq 1 "$hosts"); do
        read -r rx tx < <(link_bytes "$k")
        before=$((before + rx + tx)) tx0=$((tx0 + tx))
    done
    timeout 600 bash "$hosts_sh" exec sr-h1 mpirun --allow-run-as-root -np $((hosts * rpp)) \
        --hostfile "$out/hostfile" --map-by slot --bind-to none --mca plm_rsh_agent "$agent" \
        --mca btl tcp,self --mca btl_tcp_if_include 10.213.0.0/24 \
        --mca oob_tcp_if_include 10.213.0.0/24 -x OMP_WAIT_POLICY=PASSIVE \
        "$bin" bench "$config" --steps "$n" --warmup 16 --json "$json" "${profile[@]}" "${sets[@]}" \
        >"$json.log" 2>&1 || { echo "sweep.sh: bench failed, see $json.log" >&2; exit 1; }
    for k in $(seq 1 "$hosts"); do
        read -r rx tx < <(link_bytes "$k")
        after=$((after + rx + tx)) tx1=$((tx1 + tx))
    done
    echo "$((after - before)) $((tx1 - tx0))"
}

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

csv="$out/sweep.csv"
echo "hosts,ranks_per_host,ranks,hierarchical,qcomms,hierarchical_on,step_ms,samples_per_s,pooled_bytes_per_step,cross_node_bytes_per_step,link_bytes_per_step_per_host,algbw_gbps,busbw_gbps,rate,busbw_mbit_s,cross_node_mbit_s_per_link,link_tx_mbit_s,rate_mbit_s,ids_bytes_per_step,ids_busbw_gbps,pooled_ms_per_step,pooled_busbw_own_gbps,allreduce_bytes,allreduce_ms_per_step,allreduce_busbw_gbps,allreduce_busbw_own_gbps" >"$csv"
for hosts in ${SR_SWEEP_HOSTS:-1 2}; do
    bash "$hosts_sh" up "$hosts"
    for rpp in ${SR_SWEEP_RPP:-1 2}; do
        bash "$hosts_sh" hostfile "$rpp" >"$out/hostfile"
        if [ -n "$rate" ]; then
            for k in $(seq 1 "$hosts"); do
                bash "$hosts_sh" exec "sr-h$k" tc qdisc replace dev eth0 root tbf rate "$rate" \
                    burst 32kb latency 50ms
            done
        fi
        for hier in false true; do
            for q in ${SR_SWEEP_QCOMMS:-fp32 fp16 fp8}; do
                tag="h${hosts}-r${rpp}-${hier}-${q}"
                # "rx+tx tx" of each run; a failed run ends the sweep (set -e).
                short=$(run_bench "$hosts" "$rpp" "$hier" "$q" "$steps" "$out/$tag.s.json" \
                    --profile)
                long=$(run_bench "$hosts" "$rpp" "$hier" "$q" $((2 * steps)) "$out/$tag.json")
                read -r short short_tx <<<"$short"
                read -r long long_tx <<<"$long"
                j="$out/$tag.json"
                n=$((hosts * rpp))
                python3 - "$j" "$hosts" "$rpp" "$hier" "$q" "$short" "$short_tx" "$long" \
                    "$long_tx" "$steps" "$n" \
                    "${rate:-none}" "$out/$tag.s.json" >>"$csv" <<'PY'
import json, re, sys
j, hosts, rpp, hier, q, short, short_tx, long, long_tx, steps, n, rate, profiled = sys.argv[1:]
r = json.load(open(j))
regions = json.load(open(profiled))["profile_ms_per_step"]
n = int(n)
pooled = r["pooled_comm_forward_bytes_per_step"] + r["pooled_comm_backward_bytes_per_step"]
cross = r["cross_node_forward_bytes_per_step"] + r["cross_node_backward_bytes_per_step"]
link = (int(long) - int(short)) / int(steps) / int(hosts)
step_s = r["step_ms"] / 1e3
# bench counts the bytes each rank sends to the others (its own chunk left out), i.e. (n-1)/n of
# nccl-tests' buffer size: algbw = that buffer / step time, busbw = algbw * (n-1)/n = the bytes
# each rank sent to the others per second. The step time holds compute and the other collectives
# too, so both are lower bounds of the collective's own.
algbw = pooled / (n - 1) / step_s / 1e9 if n > 1 else 0.0
busbw = algbw * (n - 1) / n if n > 1 else 0.0
# What each host's link sent per second, and tc's rate in the same unit (SI, as tc reads it).
cross_mbit = cross / int(hosts) * 8 / step_s / 1e6  # the pooled bytes out of each host's link
tx_mbit = (int(long_tx) - int(short_tx)) / int(steps) / int(hosts) * 8 / step_s / 1e6
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate.lower())
rate_mbit = float(m[1]) * {"": 1e-6, "k": 1e-3, "m": 1, "g": 1e3}[m[2]] if m else 0.0
# The ids' all-to-alls as the pooled exchange; their own time overlaps the step (the pipeline
# runs them ahead), so only the step bound is given.
ids = r["input_comm_bytes_per_step"]
ids_busbw = ids / n / step_s / 1e9 if n > 1 else 0.0
# The blocking collectives' own time: the output_dist regions (forward and backward, with their
# encoding and the placing of columns) and the all_reduce region (with its copies), per step.
pooled_ms = sum(v for k, v in regions.items() if k.endswith("output_dist"))
pooled_own = pooled / n / (pooled_ms / 1e3) / 1e9 if n > 1 and pooled_ms > 0 else 0.0
# nccl-tests' all-reduce: algbw = the buffer S / time, busbw = algbw * 2 (n-1) / n.
ar = r["allreduce_bytes"]
ar_ms = sum(v for k, v in regions.items() if k.endswith("all_reduce"))
ar_busbw = ar / step_s / 1e9 * 2 * (n - 1) / n if n > 1 else 0.0
ar_own = ar / (ar_ms / 1e3) / 1e9 * 2 * (n - 1) / n if n > 1 and ar_ms > 0 else 0.0
print(f"{hosts},{rpp},{n},{hier},{q},{str(r['hierarchical']).lower()},{r['step_ms']:.3f},"
      f"{r['samples_per_s']:.0f},{pooled:.0f},{cross:.0f},{link:.0f},{algbw:.4f},{busbw:.4f},{rate},"
      f"{busbw * 8e3:.1f},{cross_mbit:.1f},{tx_mbit:.1f},{rate_mbit:g},{ids:.0f},{ids_busbw:.4f},"
      f"{pooled_ms:.3f},{pooled_own:.4f},{ar},{ar_ms:.3f},{ar_busbw:.4f},{ar_own:.4f}")
PY
                tail -1 "$csv"
            done
        done
    done
done
# The table (and a plot where gnuplot is installed).
column -s, -t "$csv" >"$out/table.txt"
if command -v gnuplot >/dev/null; then
    # Top: the bytes to other nodes; bottom: the step time, flat beside hierarchical.
    gnuplot <<GP || true
set terminal png size 1000,800
set output "$out/sweep.png"
set datafile separator ","
set multiplot layout 2,1 title "shardrec bench across emulated hosts (rate: ${rate:-none})"
set style data histograms
set style fill solid 0.6
set xtics rotate by -45 font ",8"
set yrange [0:*]
set ylabel "cross-node bytes per step"
plot "$csv" every ::1 using 10:xtic(sprintf("%sx%s %s %s", strcol(1), strcol(2), strcol(4), strcol(5))) title "to other nodes"
set ylabel "step time (ms)"
plot "$csv" every ::1 using 7:xtic(sprintf("%sx%s %s %s", strcol(1), strcol(2), strcol(4), strcol(5))) title "median step"
unset multiplot
GP
fi
rm -f "$out/hostfile" "$out"/*.s.json "$out"/*.s.json.log
echo "sweep.sh: $csv"
