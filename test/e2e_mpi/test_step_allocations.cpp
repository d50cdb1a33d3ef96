// Steady-state sharded training steps allocate (almost) nothing: after warm-up, a step's tensor
// allocations are bounded per dist path, on both pipelines (TrainPipelineSparseDist keeps the
// next batch's input dist in flight, so its buffers must not be reused while referenced). The
// single-process step allocates none (test/train/test_trainer.cpp).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/allocator.h"
#include "engine/train/trainer.h"

using namespace shardrec;

namespace {

const char* const kConfig = R"(
train: {steps: 16, seed: 5, log_every: 100, eval_samples: 64}
data: {type: synthetic, batch_size: 8}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [16, 8]
  top_mlp: [16, 1]
  tables:
    - {name: big, num_embeddings: 301, pooling_factor: 2}
    - {name: avg, num_embeddings: 97, pooling: mean, pooling_factor: 3}
    - {name: cols, num_embeddings: 23}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
)";

// Tensor allocations of `measured` steps after `warmup` steps of `sets` on `pipeline`.
int64_t step_allocations(const std::vector<std::string>& sets,
                         const std::string& pipeline,
                         int64_t warmup,
                         int64_t measured) {
    std::vector<std::string> all = sets;
    all.push_back("train.pipeline=" + pipeline);
    const Config config = parse_config(kConfig, all);
    train::Trainer trainer(config, comm::world_process_group());
    std::vector<Batch> batches;
    for (int64_t s = 0; s < 4; ++s)
        batches.push_back(trainer.train_batch(s));
    // Two steps more than used: the sparse-dist pipeline stays full while measured.
    const auto inputs = trainer.cycled_inputs(batches, warmup + measured + 2);
    for (int64_t s = 0; s < warmup; ++s)
        REQUIRE(trainer.progress(*inputs));
    const int64_t before = cpu_alloc_stats().num_allocs;
    for (int64_t s = 0; s < measured; ++s)
        REQUIRE(trainer.progress(*inputs));
    return cpu_alloc_stats().num_allocs - before;
}

}  // namespace

TEST_CASE("sharded training steps: allocations per step after warm-up", "[mpi][e2e]") {
    struct Case {
        std::vector<std::string> sets;
        int64_t per_step;  // the most tensor allocations one step may make
    };

    // What still allocates per step, as measured at np 1, 2 and 4 (zero-sized tensors allocate
    // nothing, so a rank may allocate fewer): every path whose KJT travels, KJTAllToAll's recat
    // lengths and values and the received KJT's offsets (3; they live on in the group's received
    // KJT while a pipelined batch's input dist runs). row_wise: the kjt.permute before
    // bucketize on top (6). data_parallel: kjt.permute in forward (3). Reused instead: the
    // KJTAllToAll counts and receive buffers, the entries path's and bucketize's send buffers,
    // the data_parallel backward's all-gather buffers and the lookups' offsets.
    const std::vector<Case> cases = {
        {{"sharding.sharding_type=table_wise"}, 3},
        {{"sharding.sharding_type=column_wise"}, 3},
        {{"sharding.sharding_type=table_row_wise"}, 3},
        {{"sharding.sharding_type=row_wise"}, 6},
        {{"sharding.sharding_type=data_parallel"}, 3},
        {{"sharding.sharding_type=table_wise",
          "sharding.tables=[{name: big, sharding_type: "
          "row_wise}, {name: cols, sharding_type: "
          "data_parallel}]"},
         12},
    };
    const int64_t warmup = 6, measured = 4;
    for (const Case& c : cases) {
        for (const std::string pipeline : {"base", "sparse_dist"}) {
            const int64_t allocs = step_allocations(c.sets, pipeline, warmup, measured);
            INFO(c.sets.back() << " on " << pipeline << ": " << allocs << " allocations in "
                               << measured << " steps");
            CHECK(allocs <= c.per_step * measured);
        }
    }
}
