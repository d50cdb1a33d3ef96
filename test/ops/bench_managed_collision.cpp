// bench_managed_collision: the CPU cost per id of a managed-collision table's remap
// (MCHManagedCollisionModule::forward: profile + remap, the training step; remap alone, read-only:
// evaluation) next to the pooled embedding lookup of the same ids (kernels::embedding_bag_forward,
// SUM, dim D, a table of zch_size rows). Raw ids are Zipf (alpha 1.05) over a space of
// 64 * zch_size ranks scattered over 63 bits, so the slots are full and every eviction pass has
// work: the timing starts after warm-up steps that fill them (steady state), and forward's mean
// includes its eviction passes (every eviction_interval steps). Each step is a new batch.
// Checked before timing: forward's rows and remap's agree, and every row is in range.
//
//   bench_managed_collision [--zch N] [--batch B] [--pooling L] [--dim D] [--interval I]
//                           [--steps S]
// Prints a CSV header and row: ..., forward_ns_per_id (mean over the timed steps, eviction passes
// included), remap_ns_per_id, forward_no_eviction_ns_per_id (the steps without a pass),
// lookup_ns_per_id, and forward's and remap's ratio to the lookup.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/modules/managed_collision.h"
#include "kernels/embedding_bag.h"

using namespace shardrec;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Zipf(alpha) rank in [0, n) by the continuous inverse CDF, then a 63-bit raw id.
int64_t zipf_raw_id(uint64_t bits, double n, double alpha) {
    const double u = rng::uniform01(bits);
    const double span = std::pow(n + 1.0, 1.0 - alpha) - 1.0;
    const auto rank = static_cast<uint64_t>(std::pow(1.0 + u * span, 1.0 / (1.0 - alpha)) - 1.0);
    return static_cast<int64_t>(rng::mix64(rank + 1) >> 1);
}

}  // namespace

int main(int argc, char** argv) {
    int64_t zch = 1 << 20, batch = 2048, pooling = 10, dim = 128, interval = 100, steps = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const int64_t v = std::atoll(argv[i + 1]);
        if (a == "--zch")
            zch = v;
        else if (a == "--batch")
            batch = v;
        else if (a == "--pooling")
            pooling = v;
        else if (a == "--dim")
            dim = v;
        else if (a == "--interval")
            interval = v;
        else if (a == "--steps")
            steps = v;
        else {
            std::fprintf(stderr, "bench_managed_collision: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    const int64_t n = batch * pooling;  // fixed pooling: every bag has L ids
    ManagedCollisionOptions o;
    o.zch_size = zch;
    o.mch_size = 0;
    o.eviction_policy = EvictionPolicy::kDistanceLfu;
    o.eviction_interval = interval;
    MCHManagedCollisionModule mc("bench", o);
    const double space = 64.0 * static_cast<double>(zch);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    int64_t draw = 0;
    const auto next_batch = [&] {
        for (int64_t i = 0; i < n; ++i, ++draw)
            ids[static_cast<size_t>(i)] =
                zipf_raw_id(rng::hash(7, static_cast<uint64_t>(draw)), space, 1.05);
    };
    // Warm-up: until the slots are full and a few eviction passes have run.
    int64_t warm = 0;
    Tensor rows = Tensor::empty({n}, DType::kI64);
    while (mc.occupancy() < mc.usable_slots() || warm < 3 * interval) {
        next_batch();
        mc.forward(ids.data(), n, rows.data<int64_t>());
        mc.evict();
        ++warm;
    }
    Tensor weights = Tensor::empty({zch, dim}, DType::kF32);
    float* w = weights.data<float>();
    for (int64_t i = 0; i < zch * dim; ++i)
        w[i] = static_cast<float>(i % 97) * 0.01f;
    Tensor table_offsets = Tensor::empty({2}, DType::kI64);
    table_offsets.data<int64_t>()[0] = 0;
    table_offsets.data<int64_t>()[1] = zch;
    Tensor feature_table = Tensor::empty({1}, DType::kI32);
    feature_table.data<int32_t>()[0] = 0;
    Tensor offsets = Tensor::empty({batch + 1}, DType::kI64);
    for (int64_t b = 0; b <= batch; ++b)
        offsets.data<int64_t>()[b] = b * pooling;
    Tensor out = Tensor::empty({batch, dim}, DType::kF32);
    std::vector<int64_t> read_only(static_cast<size_t>(n));
    double t_forward = 0, t_remap = 0, t_lookup = 0;
    double t_profile_plain = 0;  // forward in the steps without an eviction pass
    int64_t plain_steps = 0;
    int64_t wrong = 0;
    for (int64_t s = 0; s < steps; ++s) {
        next_batch();
        auto t0 = Clock::now();
        mc.forward(ids.data(), n, rows.data<int64_t>());
        const double dt = seconds_since(t0);
        t_forward += dt;
        if (mc.step() % interval != 0) {
            t_profile_plain += dt;
            ++plain_steps;
        }
        mc.evict();
        t0 = Clock::now();
        mc.remap(ids.data(), n, read_only.data());
        t_remap += seconds_since(t0);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t r = rows.data<int64_t>()[i];
            wrong += (r != read_only[static_cast<size_t>(i)] || r < 0 || r >= zch) ? 1 : 0;
        }
        t0 = Clock::now();
        kernels::embedding_bag_forward(weights, table_offsets, feature_table, rows, offsets,
                                       nullptr, PoolingMode::kSum, out, Stream::cpu());
        t_lookup += seconds_since(t0);
    }
    if (wrong != 0) {
        std::fprintf(stderr, "bench_managed_collision: #wrong %lld rows\n",
                     static_cast<long long>(wrong));
        return 1;
    }
    const double ids_total = static_cast<double>(n * steps);
    const double f = t_forward * 1e9 / ids_total, r = t_remap * 1e9 / ids_total,
                 l = t_lookup * 1e9 / ids_total;
    const double p =
        t_profile_plain * 1e9 / static_cast<double>(n * std::max<int64_t>(plain_steps, 1));
    std::printf(
        "zch,batch,pooling,dim,ids_per_step,warmup_steps,forward_ns_per_id,remap_ns_per_id,"
        "forward_no_eviction_ns_per_id,lookup_ns_per_id,forward_over_lookup,remap_over_lookup\n");
    std::printf("%lld,%lld,%lld,%lld,%lld,%lld,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f\n",
                static_cast<long long>(zch), static_cast<long long>(batch),
                static_cast<long long>(pooling), static_cast<long long>(dim),
                static_cast<long long>(n), static_cast<long long>(warm), f, r, p, l, f / l, r / l);
    return 0;
}
