#!/usr/bin/env python3
"""Load test of `shardrec serve`, bounded in requests and time, loopback only.

Starts `shardrec serve MODEL_DIR --port 0` itself, then for each batch size sends --requests
POST /v1/score requests of that many examples from --clients concurrent clients (one keep-alive
connection each) and prints, per batch size, p50/p99 latency, requests/s and examples/s, and the
errors (any non-200 answer or a wrong number of scores counts); then stops the server with
SIGTERM and checks that it exited 0. The examples are the quickstart's features with seeded
random ids and dense values. Exit status 1 on any error.

  scripts/bench_serve.py build/shardrec MODEL_DIR [--requests 2000] [--clients 16]
      [--batches 1,16,256] [--max-batch 256] [--max-wait-ms 2] [--json OUT.json]
"""
import argparse
import http.client
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time

# The quickstart's features and their tables' rows (configs/quickstart.yaml).
FEATURES = {"f_t0": 20000, "f_t1": 10000, "f_t2": 5000, "f_t3": 2000,
            "f_t4": 1000, "f_t5": 4000, "f_t6": 8000, "f_t7": 15000}


def body(rng, batch):
    examples = []
    for _ in range(batch):
        examples.append({
            "dense": [round(rng.uniform(0, 5), 6) for _ in range(13)],
            "sparse": {f: [rng.randrange(rows) for _ in range(rng.randrange(1, 4))]
                       for f, rows in FEATURES.items()},
        })
    return json.dumps({"examples": examples}).encode()


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p / 100.0 * len(sorted_values)))]


def run(port, batch, requests, clients, deadline_s):
    rng = random.Random(batch)
    bodies = [body(rng, batch) for _ in range(8)]
    latencies, errors = [], []
    lock = threading.Lock()
    counter = iter(range(requests))
    stop_at = time.monotonic() + deadline_s

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in counter:
            if time.monotonic() > stop_at:
                with lock:
                    errors.append("deadline")
                return
            start = time.perf_counter()
            try:
                conn.request("POST", "/v1/score", bodies[i % len(bodies)],
                             {"Content-Type": "application/json"})
                res = conn.getresponse()
                data = res.read()
                ok = res.status == 200 and len(json.loads(data)["scores"]) == batch
                why = "" if ok else f"HTTP {res.status}: {data[:200]!r}"
            except Exception as e:  # a refused or reset connection is an error, not a crash
                why = repr(e)
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            elapsed = time.perf_counter() - start
            with lock:
                if why:
                    errors.append(why)
                else:
                    latencies.append(elapsed)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies.sort()
    done = len(latencies)
    return {"batch": batch, "requests": done, "clients": clients, "errors": len(errors),
            "first_error": errors[0] if errors else "",
            "p50_ms": 1e3 * percentile(latencies, 50) if done else None,
            "p99_ms": 1e3 * percentile(latencies, 99) if done else None,
            "requests_per_s": done / wall, "examples_per_s": done * batch / wall,
            "seconds": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--batches", default="1,16,256")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-wait-ms", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, default=120, help="per batch size")
    ap.add_argument("--json")
    a = ap.parse_args()

    server = subprocess.Popen(
        [a.bin, "serve", a.model, "--port", "0", "--threads", str(a.clients),
         "--max-batch", str(a.max_batch), "--max-wait-ms", str(a.max_wait_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    log = []
    for line in server.stdout:  # the log line, then {"kind":"serve",...,"port":P}
        log.append(line)
        m = re.search(r'"port":(\d+)', line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("serve did not start:\n" + "".join(log))
    threading.Thread(target=lambda: [log.append(x) for x in server.stdout], daemon=True).start()

    rows = []
    print(f"{'batch':>6} {'requests':>9} {'clients':>8} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'req/s':>9} {'examples/s':>11} {'errors':>7}")
    for batch in [int(b) for b in a.batches.split(",")]:
        r = run(port, batch, a.requests, a.clients, a.deadline_s)
        rows.append(r)
        p50 = f"{r['p50_ms']:.2f}" if r["p50_ms"] is not None else "-"
        p99 = f"{r['p99_ms']:.2f}" if r["p99_ms"] is not None else "-"
        print(f"{batch:>6} {r['requests']:>9} {a.clients:>8} {p50:>9} {p99:>9} "
              f"{r['requests_per_s']:>9.0f} {r['examples_per_s']:>11.0f} {r['errors']:>7}"
              + (f"  first: {r['first_error']}" if r["errors"] else ""), flush=True)

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    server.send_signal(signal.SIGTERM)
    rc = server.wait(timeout=30)
    batches = re.search(r"shardrec_serve_batches_total (\d+)", metrics)
    examples = re.search(r"shardrec_serve_batch_examples_total (\d+)", metrics)
    if batches and examples and int(batches.group(1)) > 0:
        print(f"server: {batches.group(1)} batches, {int(examples.group(1)) / int(batches.group(1)):.1f} "
              f"examples per batch on average; exit status {rc}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "exit_status": rc, "max_batch": a.max_batch,
                       "max_wait_ms": a.max_wait_ms}, f, indent=1)
    sys.exit(0 if rc == 0 and all(r["errors"] == 0 for r in rows) else 1)


if __name__ == "__main__":
    main()
