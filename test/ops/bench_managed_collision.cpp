// bench_managed_collision: the CPU cost per id of a managed-collision table's remap as training
// runs it (ManagedCollisionTables::remap_train: each bucket's profile + remap with its eviction
// passes, the evicted rows' reset, total_num_buckets buckets on the CPU threads at once) and as
// evaluation does (remap_eval, read-only), next to the pooled embedding lookup of the same ids
// (kernels::embedding_bag_forward, SUM, dim D, on the table's own rows). Raw ids are Zipf (alpha
// 1.05) over a space of 64 * zch_size ranks scattered over 63 bits, so the slots are full and
// every eviction pass has work: the timing starts after warm-up steps that fill them (steady
// state), and forward's mean includes its eviction passes (every eviction_interval steps). Each
// step is a new batch: its training remap, the lookup of the rows it gave (right after, as a
// training step consumes them; timed after the read-only remap instead, the lookup took 5-7 %
// more or less with how that remap ran), the read-only remap of the same ids, checked against
// training's rows (and every row in range), and the fused update.
//
//   bench_managed_collision [--zch N] [--batch B] [--pooling L] [--dim D] [--interval I]
//                           [--buckets K] [--steps S] [--threshold none|average|dynamic:N|
//                           probabilistic:p]
// Prints a CSV header and row: ..., forward_ns_per_id (mean over the timed steps, eviction passes
// included), remap_ns_per_id, forward_no_eviction_ns_per_id (the steps without a pass),
// lookup_ns_per_id, and forward's and remap's ratio to the lookup; update_ns_per_id (the fused
// row-wise Adagrad update of the same rows, the rest of a training step's embedding work) and
// forward's ratios to the lookup and update together (all its steps, and those without a pass);
// and the median over the steps without a pass of each step's forward over its own lookup.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/rng.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/modules/model.h"
#include "engine/train/managed_collision_tables.h"
#include "kernels/embedding_bag.h"

using namespace shardrec;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    if (v.empty())
        return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
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
    int64_t buckets = 1;
    std::string threshold = "none";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const int64_t v = std::atoll(argv[i + 1]);
        if (a == "--threshold")
            threshold = argv[i + 1];
        else if (a == "--zch")
            zch = v;
        else if (a == "--batch")
            batch = v;
        else if (a == "--pooling")
            pooling = v;
        else if (a == "--dim")
            dim = v;
        else if (a == "--interval")
            interval = v;
        else if (a == "--buckets")
            buckets = v;
        else if (a == "--steps")
            steps = v;
        else {
            std::fprintf(stderr, "bench_managed_collision: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    const int64_t n = batch * pooling;  // fixed pooling: every bag has L ids
    const std::string yaml = fmt::format(R"(
train: {{steps: 1, seed: 7}}
data: {{type: synthetic, batch_size: {batch}}}
model:
  type: dlrm
  embedding_dim: {dim}
  bottom_mlp: [{dim}]
  top_mlp: [1]
  tables:
    - {{name: t, num_embeddings: {zch}, managed_collision: {{zch_size: {zch},
        eviction_policy: distance_lfu, eviction_interval: {interval}, total_num_buckets: {k},
        threshold: "{threshold}"}}}}
optimizer: {{sparse: {{type: rowwise_adagrad}}}}
)",
                                         fmt::arg("batch", batch), fmt::arg("dim", dim),
                                         fmt::arg("zch", zch), fmt::arg("interval", interval),
                                         fmt::arg("k", buckets), fmt::arg("threshold", threshold));
    const Config config = parse_config(yaml, {});
    auto ebc = make_embedding_bag_collection(config.model, 7,
                                             sparse_optimizer_params(config.optimizer.sparse));
    train::ManagedCollisionTables mc(config.model, 7);
    const double space = 64.0 * static_cast<double>(zch);
    Tensor lengths = Tensor::empty({batch}, DType::kI64);
    std::fill(lengths.data<int64_t>(), lengths.data<int64_t>() + batch, pooling);
    int64_t draw = 0;
    const auto next_batch = [&] {
        Tensor ids = Tensor::empty({n}, DType::kI64);
        for (int64_t i = 0; i < n; ++i, ++draw)
            ids.data<int64_t>()[i] =
                zipf_raw_id(rng::hash(7, static_cast<uint64_t>(draw)), space, 1.05);
        Batch b;
        b.sparse = KeyedJaggedTensor::from_lengths_sync({"f_t"}, ids, lengths);
        return b;
    };
    const auto full = [&] {
        for (int64_t b = 0; b < buckets; ++b) {
            if (mc.module(0, b).occupancy() < mc.module(0, b).usable_slots())
                return false;
        }
        return true;
    };
    // Warm-up: until the slots are full and a few eviction passes have run.
    int64_t warm = 0;
    while (!full() || warm < 3 * interval) {
        mc.remap_train(next_batch(), *ebc, Stream::cpu());
        ++warm;
    }
    mc.take_records();
    const Tensor weights = ebc->shard_states().at(0).weight;  // [zch, dim]
    Tensor table_offsets = Tensor::empty({2}, DType::kI64);
    table_offsets.data<int64_t>()[0] = 0;
    table_offsets.data<int64_t>()[1] = zch;
    Tensor feature_table = Tensor::empty({1}, DType::kI32);
    feature_table.data<int32_t>()[0] = 0;
    Tensor offsets = Tensor::empty({batch + 1}, DType::kI64);
    for (int64_t b = 0; b <= batch; ++b)
        offsets.data<int64_t>()[b] = b * pooling;
    Tensor out = Tensor::empty({batch, dim}, DType::kF32);
    // The training step's own work on the same rows: the fused row-wise Adagrad update.
    Tensor grad = Tensor::empty({batch, dim}, DType::kF32);
    for (int64_t i = 0; i < batch * dim; ++i)
        grad.data<float>()[i] =
            static_cast<float>(rng::uniform(9, static_cast<uint64_t>(i))) - 0.5f;
    const kernels::FusedOptimizerParams optim = sparse_optimizer_params(config.optimizer.sparse);
    Tensor weights_rw = ebc->shard_states().at(0).weight;
    Tensor state = ebc->shard_states().at(0).optimizer_state.at(0);
    kernels::EmbeddingBackwardWorkspace workspace;
    double t_forward = 0, t_remap = 0, t_lookup = 0, t_update = 0;
    double t_profile_plain = 0;  // forward in the steps without an eviction pass
    int64_t plain_steps = 0;
    // Each step without a pass: its forward over its own lookup, timed within milliseconds of
    // each other (a VM's slow spells fall on both).
    std::vector<double> plain_ratios;
    int64_t wrong = 0;
    for (int64_t s = 0; s < steps; ++s) {
        const Batch batch_ids = next_batch();
        auto t0 = Clock::now();
        const Batch trained = mc.remap_train(batch_ids, *ebc, Stream::cpu());
        const double dt = seconds_since(t0);
        t_forward += dt;
        const bool plain = (warm + s + 1) % interval != 0;
        if (plain) {
            t_profile_plain += dt;
            ++plain_steps;
        }
        const Tensor rows = trained.sparse.values();
        t0 = Clock::now();
        kernels::embedding_bag_forward(weights, table_offsets, feature_table, rows, offsets,
                                       nullptr, PoolingMode::kSum, out, Stream::cpu());
        const double lookup_dt = seconds_since(t0);
        t_lookup += lookup_dt;
        if (plain)
            plain_ratios.push_back(dt / lookup_dt);
        t0 = Clock::now();
        const Batch read_only = mc.remap_eval(batch_ids);
        t_remap += seconds_since(t0);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t r = rows.data<int64_t>()[i];
            wrong +=
                (r != read_only.sparse.values().data<int64_t>()[i] || r < 0 || r >= zch) ? 1 : 0;
        }
        t0 = Clock::now();
        kernels::embedding_bag_backward_fused(grad, table_offsets, feature_table, rows, offsets,
                                              nullptr, PoolingMode::kSum, optim, weights_rw, &state,
                                              nullptr, workspace, Stream::cpu());
        t_update += seconds_since(t0);
    }
    int64_t evicted = 0, passes = 0;
    double hits = 0;
    for (const train::ManagedCollisionRecord& rec : mc.take_records()) {
        evicted += rec.evictions;
        hits += rec.hit_fraction;
        ++passes;
    }
    if (wrong != 0) {
        std::fprintf(stderr, "bench_managed_collision: #wrong %lld rows\n",
                     static_cast<long long>(wrong));
        return 1;
    }
    const double ids_total = static_cast<double>(n * steps);
    const double f = t_forward * 1e9 / ids_total, r = t_remap * 1e9 / ids_total,
                 l = t_lookup * 1e9 / ids_total, u = t_update * 1e9 / ids_total;
    const double p =
        t_profile_plain * 1e9 / static_cast<double>(n * std::max<int64_t>(plain_steps, 1));
    std::printf(
        "zch,buckets,threshold,batch,pooling,dim,ids_per_step,warmup_steps,forward_ns_per_id,"
        "remap_ns_per_id,forward_no_eviction_ns_per_id,lookup_ns_per_id,forward_over_lookup,"
        "remap_over_lookup,update_ns_per_id,forward_over_lookup_and_update,"
        "no_eviction_over_lookup_and_update,evictions_per_pass,hit_fraction,"
        "no_eviction_over_lookup_median_of_steps\n");
    std::printf(
        "%lld,%lld,%s,%lld,%lld,%lld,%lld,%lld,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.2f,%.3f,%.3f,%.0f,%."
        "3f,%.3f\n",
        static_cast<long long>(zch), static_cast<long long>(buckets), threshold.c_str(),
        static_cast<long long>(batch), static_cast<long long>(pooling), static_cast<long long>(dim),
        static_cast<long long>(n), static_cast<long long>(warm), f, r, p, l, f / l, r / l, u,
        f / (l + u), p / (l + u),
        static_cast<double>(evicted) / static_cast<double>(std::max<int64_t>(passes, 1)),
        hits / static_cast<double>(std::max<int64_t>(passes, 1)), median(plain_ratios));
    return 0;
}
