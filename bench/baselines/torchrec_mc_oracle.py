#!/usr/bin/env python3
"""Runs TorchRec's own MCHManagedCollisionModule on small id streams and writes the committed
managed-collision oracle test/fixtures/torchrec_mc/cases.txt (Python is only for this; the build
and the tests never need it). test/modules/test_managed_collision.cpp feeds the same streams to
shardrec's MCHManagedCollisionModule and compares, step by step, which ids of each batch found a
slot of their own, which ids hold the slots after the step and how many rows were evicted.

Each case: zch_size 16 (15 slots ids can own; TorchRec reserves its last sorted position, as
shardrec reserves the fallback slot), one eviction policy with its decay_exponent (1, TorchRec's
default, in the 18 cases of every policy and filter; 0.5 and 2 for distance_lfu and 2 for lru in
6 more), one threshold filter, one eviction_interval I. Steps 1 to I bring the same batch, 15
frequent ids and 150 rare ones, so the 15 fill the slots at the first eviction pass (step I), whatever the policy and filter:
shardrec gives new ids free slots at once where TorchRec waits for that pass, and past it the two
should differ nowhere (that is what this checks; the test compares from step I). The later steps draw ids from a skewed vocabulary that shifts halfway
(the old ids fade, new ones come).
Rows are not compared: which freed row a new id takes is an implementation choice.

File format (text), per case:
  case POLICY THRESHOLD INTERVAL STEPS DECAY
  then per step:  ids N id...  /  hit N 0|1...  /  map M id... (ascending)  /
                  evict K row... (the rows TorchRec's evict() returned, ascending)

  /work/.venv-torchrec/bin/python bench/baselines/torchrec_mc_oracle.py \
      --out test/fixtures/torchrec_mc/cases.txt
Checked with torch 2.5.1, torchrec 1.0.0.
"""
import argparse

import torch
from torchrec.modules.mc_modules import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    MCHManagedCollisionModule,
    average_threshold_filter,
    dynamic_threshold_filter,
)
from torchrec.sparse.jagged_tensor import JaggedTensor

ZCH = 16
EMPTY = torch.iinfo(torch.int64).max


def policy(name, threshold, decay):
    filt = {
        "none": None,
        "average": average_threshold_filter,
        "dynamic:2": lambda counts: dynamic_threshold_filter(counts, 2.0),
    }[threshold]
    if name == "lfu":
        return LFU_EvictionPolicy(threshold_filtering_func=filt)
    if name == "lru":
        return LRU_EvictionPolicy(decay_exponent=decay, threshold_filtering_func=filt)
    return DistanceLFU_EvictionPolicy(decay_exponent=decay, threshold_filtering_func=filt)


def stream(seed, steps, batch, interval):
    g = torch.Generator().manual_seed(seed)
    # 15 ids seen 3 times each (the smallest, so shardrec's at-once fill takes them too) and 150
    # seen once, which keep the filters' thresholds below 3.
    fill = [101 + i for i in range(ZCH - 1) for _ in range(3)] + list(range(2000, 2150))
    out = [fill] * interval
    for t in range(interval, steps):
        u = torch.rand(batch, generator=g)
        ranks = (40 * u * u * u).long()  # skewed over 40 ranks
        base = 100 if t < steps // 2 else 1000  # the shift: a new vocabulary halfway
        old = torch.rand(batch, generator=g) < 0.25  # some old ids still come
        ids = torch.where(old, 100 + ranks, base + ranks)
        out.append(ids.tolist())
    return out


def run_case(f, name, threshold, interval, steps, seed, decay=1.0):
    mc = MCHManagedCollisionModule(
        zch_size=ZCH,
        device=torch.device("cpu"),
        eviction_policy=policy(name, threshold, decay),
        eviction_interval=interval,
    )
    mc.train()
    batches = stream(seed, steps, 24, interval)
    f.write(f"case {name} {threshold} {interval} {steps} {decay:g}\n")
    for ids in batches:
        values = torch.tensor(ids, dtype=torch.int64)
        jt = JaggedTensor(values=values, lengths=torch.tensor([len(ids)]))
        rows = mc({"f": jt})["f"].values().tolist()
        mapped = set(mc._mch_sorted_raw_ids.tolist()) - {EMPTY}
        # A hit is an id whose row is its own: TorchRec's fallback row is zch_size - 1.
        hits = [1 if r != ZCH - 1 else 0 for r in rows]
        assert all(h == (i in mapped) for i, h in zip(ids, hits)), "fallback row of a mapped id"
        f.write(f"ids {len(ids)} " + " ".join(map(str, ids)) + "\n")
        f.write(f"hit {len(hits)} " + " ".join(map(str, hits)) + "\n")
        f.write(f"map {len(mapped)} " + " ".join(map(str, sorted(mapped))) + "\n")
        evicted = mc.evict()
        rows = [] if evicted is None else sorted(evicted.tolist())
        f.write(f"evict {len(rows)} " + " ".join(map(str, rows)) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.out, "w") as f:
        seed = 1
        for name in ("lfu", "lru", "distance_lfu"):
            for threshold in ("none", "average", "dynamic:2"):
                for interval in (1, 3):
                    run_case(f, name, threshold, interval, 40, seed)
                    seed += 1
        for name, decay in (("distance_lfu", 0.5), ("distance_lfu", 2.0), ("lru", 2.0)):
            for interval in (1, 3):
                run_case(f, name, "none", interval, 40, seed, decay)
                seed += 1


if __name__ == "__main__":
    main()
