// Training on a CUDA device (runtime.device: cuda) gives the CPU's numbers: losses, dense
// parameters, position weights, table rows and eval metrics to float tolerance (the GPU kernels
// sum in another order), for one process and for the ranks of mpirun sharing the node's GPUs,
// with every dist path in one plan, on both pipelines; steps after warm-up allocate nothing on the
// device or the host; a checkpoint written from the GPU loads into a CPU trainer bitwise; and
// compute_kernel fused_uvm (rows in mapped host memory) and fused_uvm_caching (rows in host memory
// behind an HBM cache of any size) train bitwise like fused. Its main exits 77 (not run) without a
// GPU.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <memory>

#include "comm/process_group.h"
#include "engine/core/allocator.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;

namespace {

const char* const kConfig = R"(
train: {steps: 8, seed: 5, log_every: 10, eval_samples: 96}
data: {type: synthetic, batch_size: 16}
model:
  type: dlrm_dcn
  embedding_dim: 8
  bottom_mlp: [32, 8]
  top_mlp: [32, 16, 1]
  dcn: {num_layers: 2, low_rank: 4}
  tables:
    - {name: big, num_embeddings: 301, pooling_factor: 2}
    - {name: avg, num_embeddings: 97, pooling: mean, pooling_factor: 3}
    - {name: wtd, num_embeddings: 50, weighted: true, pooling_factor: 0.7}
    - {name: pos, num_embeddings: 41, feature_names: [s1, s2], position_weights: 4}
    - {name: cols, num_embeddings: 23, data_type: f16}
optimizer:
  dense: {type: adam, learning_rate: 0.01}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
sharding:
  sharding_type: table_wise
  tables:
    - {name: big, sharding_type: row_wise}
    - {name: avg, sharding_type: table_row_wise}
    - {name: wtd, sharding_type: data_parallel}
    - {name: cols, sharding_type: column_wise}
)";

// DeepFM: its gradient sums (kernels::add_) on the device too.
const char* const kDeepFmConfig = R"(
train: {steps: 6, seed: 3, log_every: 10, eval_samples: 64}
data: {type: synthetic, batch_size: 16}
model:
  type: deepfm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  deepfm: {hidden: [32, 16]}
  tables:
    - {name: a, num_embeddings: 200, pooling_factor: 2}
    - {name: b, num_embeddings: 61, pooling: mean, pooling_factor: 3}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: adam, learning_rate: 0.01}
sharding: {sharding_type: row_wise}
)";

std::vector<float> train_all(train::Trainer& trainer) {
    auto inputs = trainer.train_inputs(0, trainer.config().train.steps);
    std::vector<float> losses;
    while (const std::optional<train::TrainOutput> out = trainer.progress(*inputs))
        losses.push_back(out->result.loss);
    return losses;
}

// The rows of f32 table t on the host, the same on every rank.
std::vector<float> table(train::Trainer& trainer, int64_t t) {
    trainer.synchronize();
    auto& sparse = trainer.model().sparse_arch();
    if (auto* sharded = dynamic_cast<ShardedEmbeddingBagCollection*>(&sparse))
        return sharded->unsharded_weight(t).to_vector<float>();
    return dynamic_cast<EmbeddingBagCollection&>(sparse).weight(t).to_vector<float>();
}

void check_cuda_matches_cpu(const std::shared_ptr<comm::ProcessGroup>& pg,
                            const std::string& pipeline,
                            const char* config_text = kConfig) {
    const Config cpu_config = parse_config(config_text, {"train.pipeline=" + pipeline});
    const Config cuda_config =
        parse_config(config_text, {"train.pipeline=" + pipeline, "runtime.device=cuda"});
    train::Trainer cpu(cpu_config, pg);
    train::Trainer cuda(cuda_config, pg);
    REQUIRE(cuda.device().is_cuda());
    test::require_close(train_all(cuda), train_all(cpu), 1e-5, 1e-4, pipeline + " loss");
    const train::Metrics mc = cuda.evaluate(), mh = cpu.evaluate();
    CHECK(std::fabs(mc.auc - mh.auc) < 1e-3);
    CHECK(std::fabs(mc.loss - mh.loss) < 1e-4);
    const std::vector<Parameter*> cp = cuda.model().parameters();
    const std::vector<Parameter*> hp = cpu.model().parameters();
    REQUIRE(cp.size() == hp.size());
    cuda.synchronize();
    for (size_t i = 0; i < cp.size(); ++i) {
        test::require_close(cp[i]->value.to_vector<float>(), hp[i]->value.to_vector<float>(), 5e-5,
                            5e-4, pipeline + " " + hp[i]->name);
    }
    for (int64_t t = 0; t < static_cast<int64_t>(cpu_config.model.tables.size()); ++t) {
        if (cpu_config.model.tables[static_cast<size_t>(t)].data_type != "f32")
            continue;
        test::require_close(
            table(cuda, t), table(cpu, t), 5e-5, 5e-4,
            pipeline + " table " + cpu_config.model.tables[static_cast<size_t>(t)].name);
    }
}

// Allocations (device, host) of 4 steps after 12 of warm-up, 4 batches cycled.
std::array<int64_t, 2> step_allocations(const std::shared_ptr<comm::ProcessGroup>& pg,
                                        const std::string& pipeline) {
    const Config config =
        parse_config(kConfig, {"train.pipeline=" + pipeline, "runtime.device=cuda"});
    train::Trainer trainer(config, pg);
    std::vector<Batch> batches;
    for (int64_t s = 0; s < 4; ++s)
        batches.push_back(trainer.train_batch(s));
    const int64_t warmup = 12, measured = 4;
    // Two steps more than used: the sparse-dist pipeline stays full while measured.
    const auto inputs = trainer.cycled_inputs(batches, warmup + measured + 2);
    for (int64_t s = 0; s < warmup; ++s)
        REQUIRE(trainer.progress(*inputs));
    const AllocStats device0 = alloc_stats(DeviceType::kCuda);
    const AllocStats host0 = alloc_stats(DeviceType::kCpu);
    for (int64_t s = 0; s < measured; ++s)
        REQUIRE(trainer.progress(*inputs));
    return {alloc_stats(DeviceType::kCuda).num_allocs - device0.num_allocs,
            alloc_stats(DeviceType::kCpu).num_allocs - host0.num_allocs};
}

}  // namespace

TEST_CASE("cuda training steps allocate nothing after warm-up, on the device or the host",
          "[cuda][e2e]") {
    // A device allocation waits for the allocator's stream, and a pinned one locks pages: either
    // in a step would stall the pipeline.
    for (const bool sharded : {false, true}) {
        for (const char* pipeline : {"base", "sparse_dist"}) {
            const std::array<int64_t, 2> allocs =
                step_allocations(sharded ? comm::world_process_group() : nullptr, pipeline);
            INFO((sharded ? "sharded" : "one process")
                 << " on " << pipeline << ": " << allocs[0] << " device and " << allocs[1]
                 << " host allocations in 4 steps");
            CHECK(allocs[0] == 0);
            CHECK(allocs[1] == 0);
        }
    }
}

TEST_CASE("cuda training matches the cpu: one process, unsharded tables", "[cuda][e2e]") {
    for (const char* pipeline : {"base", "sparse_dist"})
        check_cuda_matches_cpu(nullptr, pipeline);
}

TEST_CASE("cuda training matches the cpu: sharded over the ranks, every dist path", "[cuda][e2e]") {
    for (const char* pipeline : {"base", "sparse_dist"})
        check_cuda_matches_cpu(comm::world_process_group(), pipeline);
}

TEST_CASE("cuda training matches the cpu: DeepFM, one process and row_wise over the ranks",
          "[cuda][e2e]") {
    check_cuda_matches_cpu(nullptr, "base", kDeepFmConfig);
    check_cuda_matches_cpu(comm::world_process_group(), "sparse_dist", kDeepFmConfig);
}

TEST_CASE("a checkpoint written on cuda loads into a cpu trainer bitwise", "[cuda][e2e]") {
    auto pg = comm::world_process_group();
    const std::string dir =
        (std::filesystem::temp_directory_path() / "shardrec_test_train_cuda_ckpt").string();
    if (pg->rank() == 0)
        std::filesystem::remove_all(dir);
    pg->barrier().wait();
    const Config cuda_config = parse_config(kConfig, {"runtime.device=cuda"});
    train::Trainer cuda(cuda_config, pg);
    train_all(cuda);
    train::save_checkpoint(cuda, dir, cuda_config.train.steps, 1);
    train::Trainer cpu(parse_config(kConfig, {}), pg);
    train::load_checkpoint(cpu, dir, {});
    const std::vector<Parameter*> cp = cuda.model().parameters();
    const std::vector<Parameter*> hp = cpu.model().parameters();
    for (size_t i = 0; i < cp.size(); ++i)
        CHECK(cp[i]->value.to_vector<float>() == hp[i]->value.to_vector<float>());
    for (int64_t t = 0; t < 4; ++t)
        CHECK(table(cuda, t) == table(cpu, t));
    pg->barrier().wait();
    if (pg->rank() == 0)
        std::filesystem::remove_all(dir);
}

// fused_uvm: the same kernels on the same rows, only in pinned host memory the GPU maps, so the
// losses and tables are bitwise fused's; the rows and optimizer state count in host memory.
TEST_CASE("cuda fused_uvm trains bitwise like fused, its rows in host memory", "[cuda][e2e]") {
    auto pg = comm::world_process_group();
    const auto built = [&](const std::vector<std::string>& sets) {
        const AllocStats device0 = alloc_stats(DeviceType::kCuda);
        const AllocStats host0 = alloc_stats(DeviceType::kCpu);
        auto trainer = std::make_unique<train::Trainer>(parse_config(kConfig, sets), pg);
        const std::array<int64_t, 2> grew{
            alloc_stats(DeviceType::kCuda).current_bytes - device0.current_bytes,
            alloc_stats(DeviceType::kCpu).current_bytes - host0.current_bytes};
        return std::make_pair(std::move(trainer), grew);
    };
    auto [fused, fused_bytes] = built({"runtime.device=cuda", "train.steps=4"});
    auto [uvm, uvm_bytes] =
        built({"runtime.device=cuda", "train.steps=4", "sharding.compute_kernel=fused_uvm"});
    REQUIRE(uvm->device().is_cuda());
    // 'big' alone (301 x 8 f32 rows, a row-wise accumulator) moves 10836 bytes, split over ranks.
    INFO("device bytes: fused " << fused_bytes[0] << ", fused_uvm " << uvm_bytes[0]
                                << "; host bytes: fused " << fused_bytes[1] << ", fused_uvm "
                                << uvm_bytes[1]);
    CHECK(uvm_bytes[1] - fused_bytes[1] >= 10836 / pg->size());
    CHECK(fused_bytes[0] - uvm_bytes[0] >= 10836 / pg->size());
    CHECK(train_all(*uvm) == train_all(*fused));
    for (int64_t t = 0; t < 4; ++t) {
        INFO("table " << t);
        CHECK(table(*uvm, t) == table(*fused, t));
    }
}

// fused_uvm_caching: the same kernels on the cache's slots in HBM, rows moving to and from host
// memory bit for bit, so every cache size (one slot a set up to every row; the smallest overflows
// every batch), both policies and both pipelines (the prefetch one fills on a stream of its own)
// train bitwise like fused; the tables read back through the cache equal fused's.
TEST_CASE("cuda fused_uvm_caching trains bitwise like fused with any cache", "[cuda][e2e]") {
    auto pg = comm::world_process_group();
    for (const std::string pipeline : {"sparse_dist", "prefetch_sparse_dist"}) {
        const std::vector<std::string> base = {"runtime.device=cuda", "train.steps=6",
                                               "train.pipeline=" + pipeline};
        train::Trainer fused(parse_config(kConfig, base), pg);
        const std::vector<float> want = train_all(fused);
        const train::Metrics want_eval = fused.evaluate();
        for (const std::string load_factor : {"0.01", "0.3", "1.0"}) {
            for (const std::string algorithm : {"lru", "lfu"}) {
                INFO(pipeline << " load_factor " << load_factor << " " << algorithm);
                std::vector<std::string> sets = base;
                sets.insert(sets.end(), {"sharding.compute_kernel=fused_uvm_caching",
                                         "sharding.cache.load_factor=" + load_factor,
                                         "sharding.cache.algorithm=" + algorithm});
                train::Trainer cached(parse_config(kConfig, sets), pg);
                CHECK(train_all(cached) == want);
                const train::Metrics got_eval = cached.evaluate();
                CHECK(got_eval.auc == want_eval.auc);
                CHECK(got_eval.loss == want_eval.loss);
                for (int64_t t = 0; t < 4; ++t) {
                    INFO("table " << t);
                    CHECK(table(cached, t) == table(fused, t));
                }
            }
        }
    }
}

// Managed collision on a GPU: the remap runs on the host as on the CPU (the same slots, evictions
// and state), two batches ahead in the sparse_dist pipeline, and the evicted rows are reset on
// the device once the steps that used them are done (fused_uvm_caching: in the HBM cache or in
// host memory): losses, eval and the tables match the CPU run within the float tolerance.
TEST_CASE("cuda managed collision trains like the CPU, evictions included", "[cuda][e2e]") {
    auto pg = comm::world_process_group();
    const std::vector<std::string> mc = {"train.steps=12",
                                         "model.tables[0].managed_collision.zch_size=50",
                                         "model.tables[0].managed_collision.mch_size=251",
                                         "model.tables[0].managed_collision.eviction_interval=3"};
    train::Trainer cpu(parse_config(kConfig, mc), pg);
    const std::vector<float> cpu_losses = train_all(cpu);
    const train::Metrics eh = cpu.evaluate();
    for (const char* kernel : {"fused", "fused_uvm_caching"}) {
        INFO("compute kernel " << kernel);
        std::vector<std::string> on_gpu = mc;
        on_gpu.insert(on_gpu.end(),
                      {"runtime.device=cuda", std::string("sharding.compute_kernel=") + kernel});
        if (std::string(kernel) == "fused_uvm_caching")
            on_gpu.push_back("sharding.cache.load_factor=0.2");
        train::Trainer cuda(parse_config(kConfig, on_gpu), pg);
        REQUIRE(cuda.device().is_cuda());
        test::require_close(train_all(cuda), cpu_losses, 1e-5, 1e-4, "managed collision loss");
        const MCHManagedCollisionModule& mg = cuda.managed_collision().module(0);
        const MCHManagedCollisionModule& mh = cpu.managed_collision().module(0);
        CHECK(mh.evictions_total() > 0);
        CHECK(mg.evictions_total() == mh.evictions_total());
        CHECK(mg.state().slot_ids == mh.state().slot_ids);
        const train::Metrics eg = cuda.evaluate();
        CHECK(std::fabs(eg.auc - eh.auc) < 1e-3);
        test::require_close(table(cuda, 0), table(cpu, 0), 5e-5, 5e-4, "managed table");
    }
}
