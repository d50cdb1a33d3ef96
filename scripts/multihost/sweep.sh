#!/usr/bin/env bash
# A sweep across emulated hosts (scripts/multihost/hosts.sh: network namespaces, TCP between
# them): hosts x ranks per host x comm.hierarchical false|true x comm.qcomms fp32|fp16|fp8, each
# point a `shardrec bench` under mpirun over the hosts. Per point: the step time (bench's median),
# the pooled bytes sent to other nodes per step (bench's own count, summed over ranks), and the
# bytes on each host's link per step, read from the veth's tx and rx bytes inside the host's
# namespace (/proc/net/dev): the difference of a run of 2S and one of S timed steps, divided by S (start-up and
# wire-up traffic cancel). busbw of the pooled exchange (nccl-tests' all-to-all definition:
# algbw * (n - 1) / n, algbw = pooled bytes per rank / step time) is set against SR_SWEEP_RATE.
#   scripts/multihost/sweep.sh [OUT_DIR]      (root; OUT_DIR: bench/results/multihost-sweep-DATE)
# Environment:
#   SR_SWEEP_HOSTS  host counts (default "1 2"; "1 2 4" takes about twice as long on 2 cores)
#   SR_SWEEP_RPP    ranks per host (default "1 2")
#   SR_SWEEP_QCOMMS precisions (default "fp32 fp16 fp8")
#   SR_SWEEP_STEPS  S (default 20)   SR_SWEEP_CONFIG (default configs/quickstart.yaml)
#   SR_SWEEP_SET    extra --set overrides (default: every table row_wise, batch 512: comm-heavy)
#   SR_SWEEP_RATE   a tbf rate on every host's link, e.g. 1gbit (default none: veth speed)
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

link_bytes() {  # HOST -> tx+rx bytes of its eth0 (/proc/net/dev: the namespace's own; /sys
    # would show the root namespace's, as nsenter keeps the mount namespace)
    bash "$hosts_sh" exec "sr-h$1" awk '/eth0:/ {printf "%d\n", $2 + $10}' /proc/net/dev
}

# One bench run: prints "<total link bytes over hosts> <json file>".
run_bench() {
    local hosts=$1 rpp=$2 hier=$3 q=$4 n=$5 json=$6 before=0 after=0 k sets=()
    for s in $extra comm.hierarchical="$hier" comm.qcomms.forward="$q" comm.qcomms.backward="$q" \
        train.log_every=1000000; do
        sets+=(--set "$s")
    done
    for k in $(seq 1 "$hosts"); do before=$((before + $(link_bytes "$k"))); done
    timeout 600 bash "$hosts_sh" exec sr-h1 mpirun --allow-run-as-root -np $((hosts * rpp)) \
        --hostfile "$out/hostfile" --map-by slot --mca plm_rsh_agent "$agent" \
        --mca btl tcp,self --mca btl_tcp_if_include 10.213.0.0/24 \
        --mca oob_tcp_if_include 10.213.0.0/24 -x OMP_WAIT_POLICY=PASSIVE \
        "$bin" bench "$config" --steps "$n" --warmup 3 --json "$json" "${sets[@]}" \
        >"$json.log" 2>&1 || { echo "sweep.sh: bench failed, see $json.log" >&2; exit 1; }
    for k in $(seq 1 "$hosts"); do after=$((after + $(link_bytes "$k"))); done
    echo $((after - before))
}

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

csv="$out/sweep.csv"
echo "hosts,ranks_per_host,ranks,hierarchical,qcomms,hierarchical_on,step_ms,samples_per_s,pooled_bytes_per_step,cross_node_bytes_per_step,link_bytes_per_step_per_host,algbw_gbps,busbw_gbps,rate" >"$csv"
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
                short=$(run_bench "$hosts" "$rpp" "$hier" "$q" "$steps" "$out/$tag.s.json")
                long=$(run_bench "$hosts" "$rpp" "$hier" "$q" $((2 * steps)) "$out/$tag.json")
                j="$out/$tag.json"
                n=$((hosts * rpp))
                python3 - "$j" "$hosts" "$rpp" "$hier" "$q" "$short" "$long" "$steps" "$n" \
                    "${rate:-none}" >>"$csv" <<'PY'
import json, sys
j, hosts, rpp, hier, q, short, long, steps, n, rate = sys.argv[1:]
r = json.load(open(j))
n = int(n)
pooled = r["pooled_comm_forward_bytes_per_step"] + r["pooled_comm_backward_bytes_per_step"]
cross = r["cross_node_forward_bytes_per_step"] + r["cross_node_backward_bytes_per_step"]
link = (int(long) - int(short)) / int(steps) / int(hosts)
step_s = r["step_ms"] / 1e3
algbw = pooled / n / step_s / 1e9 if n > 1 else 0.0  # bytes each rank sends, per second
busbw = algbw * (n - 1) / n if n > 1 else 0.0
print(f"{hosts},{rpp},{n},{hier},{q},{str(r['hierarchical']).lower()},{r['step_ms']:.3f},"
      f"{r['samples_per_s']:.0f},{pooled:.0f},{cross:.0f},{link:.0f},{algbw:.4f},{busbw:.4f},{rate}")
PY
                tail -1 "$csv"
            done
        done
    done
done
# The table (and a plot where gnuplot is installed).
column -s, -t "$csv" >"$out/table.txt"
if command -v gnuplot >/dev/null; then
    gnuplot <<GP || true
set terminal png size 900,500
set output "$out/sweep.png"
set datafile separator ","
set ylabel "bytes per step to other nodes"
set style data histograms
set xtics rotate by -45
plot "$csv" every ::1 using 10:xtic(sprintf("%sx%s %s %s", strcol(1), strcol(2), strcol(4), strcol(5))) title "cross-node bytes"
GP
fi
rm -f "$out/hostfile" "$out"/*.s.json "$out"/*.s.json.log
echo "sweep.sh: $csv"
