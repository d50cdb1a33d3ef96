// Resume is exact (ARCHITECTURE.md), under mpirun: the same plan and world continue bitwise, and
// a checkpoint written by W ranks under one plan loads under max(1, W/2) ranks and another plan
// with every table row and optimizer state bitwise, then continues as the original run does (to
// the sharding-invariance tolerance: the plans reduce in another order).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/mpi_env.h"
#include "comm/process_group.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_export.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using namespace shardrec;
namespace fs = std::filesystem;

namespace {

const char* const kConfig = R"(
train: {steps: 6, seed: 11, log_every: 3, eval_samples: 64}
data: {type: synthetic, batch_size: 4}
model:
  type: dlrm
  embedding_dim: 8
  bottom_mlp: [8, 8]
  top_mlp: [8, 1]
  tables:
    - {name: big, num_embeddings: 103, pooling_factor: 2}
    - {name: avg, num_embeddings: 29, pooling: mean, pooling_factor: 3}
    - {name: shared, num_embeddings: 17, feature_names: [s1, s2], position_weights: 3}
optimizer:
  dense: {type: adam, learning_rate: 0.01}
  sparse: {type: adagrad, learning_rate: 0.05}
)";

Config make_config(const std::string& sharding, int64_t batch_size) {
    return parse_config(std::string(kConfig) + "sharding: " + sharding + "\n",
                        {"data.batch_size=" + std::to_string(batch_size)});
}

// A directory every rank of the world agrees on, emptied by rank 0.
fs::path shared_dir(comm::ProcessGroup& world, const std::string& name) {
    const fs::path dir = fs::temp_directory_path() /
                         ("shardrec_ckpt_mpi_" + name + "_np" + std::to_string(world.size()));
    if (world.rank() == 0) {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    world.barrier().wait();
    return dir;
}

std::vector<float> train_steps(train::Trainer& t, int64_t first, int64_t end) {
    std::vector<float> losses;
    for (int64_t s = first; s < end; ++s)
        losses.push_back(t.train_step(t.train_batch(s), s).loss);
    return losses;
}

// Collective over the trainer's group: state -1 is the table's weight [E, D], else its fused
// optimizer state `state` [E, D], assembled from every rank's shards (replicas counted once).
std::vector<float> unsharded(train::Trainer& t, int64_t table, int state) {
    const auto& cfg = t.config().model.tables.at(static_cast<size_t>(table));
    const int64_t D = t.config().model.embedding_dim;
    Tensor full = Tensor::zeros({cfg.num_embeddings, D}, DType::kF32);
    const int rank = t.process_group()->rank();
    for (const auto& s : t.model().sparse_arch().shard_states()) {
        if (s.table != table || (s.replicated && rank != 0))
            continue;
        const Tensor& src = state < 0 ? s.weight : s.optimizer_state.at(static_cast<size_t>(state));
        for (int64_t r = 0; r < s.rows; ++r) {
            for (int64_t c = 0; c < s.cols; ++c) {
                full.data<float>()[(s.row_offset + r) * D + s.col_offset + c] =
                    src.data<float>()[r * s.cols + c];
            }
        }
    }
    t.process_group()->all_reduce(full, comm::ReduceOp::kSum).wait();
    return full.to_vector<float>();
}

std::vector<char> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
}

void check_reshard(const std::string& from, const std::string& to) {
    auto world = comm::world_process_group();
    const int W = world->size();
    const int W2 = std::max(1, W / 2);
    const int64_t B = 4;
    const fs::path dir = shared_dir(*world, "reshard");

    // W ranks under `from`: 2N steps straight, and a checkpoint at N.
    const Config config_from = make_config(from, B);
    train::Trainer straight(config_from, world);
    auto straight_losses = train_steps(straight, 0, 3);
    train::save_checkpoint(straight, dir.string(), 3, 1);
    std::vector<std::vector<float>> saved;
    for (int64_t t = 0; t < 3; ++t) {
        saved.push_back(unsharded(straight, t, -1));
        saved.push_back(unsharded(straight, t, 0));
    }
    const auto more = train_steps(straight, 3, 6);
    straight_losses.insert(straight_losses.end(), more.begin(), more.end());
    std::vector<std::vector<float>> straight_rows;
    for (int64_t t = 0; t < 3; ++t)
        straight_rows.push_back(unsharded(straight, t, -1));

    // The first W2 ranks (and the others, as a second group) load it under `to`, the same global
    // batch split over fewer ranks.
    auto group = world->split(world->rank() < W2 ? 0 : 1, world->rank(), "reshard");
    const Config config_to = make_config(to, B * W / group->size());
    train::Trainer resumed(config_to, group);
    REQUIRE(train::load_checkpoint(resumed, dir.string(), {true}) == 3);
    for (int64_t t = 0; t < 3; ++t) {
        INFO(from << " -> " << to << " table " << t);
        CHECK(unsharded(resumed, t, -1) == saved[static_cast<size_t>(2 * t)]);  // bitwise
        CHECK(unsharded(resumed, t, 0) == saved[static_cast<size_t>(2 * t + 1)]);
    }
    const auto resumed_losses = train_steps(resumed, 3, 6);
    // Tolerances of test_sharding_invariance: the plans sum in other orders.
    test::require_close(resumed_losses,
                        std::vector<float>(straight_losses.begin() + 3, straight_losses.end()),
                        1e-6, 1e-5, from + " -> " + to + " loss");
    for (int64_t t = 0; t < 3; ++t) {
        test::require_close(unsharded(resumed, t, -1), straight_rows[static_cast<size_t>(t)], 5e-5,
                            5e-4, from + " -> " + to + " table " + std::to_string(t));
    }
    world->barrier().wait();
}

}  // namespace

TEST_CASE("checkpoint resume: the same plan and world continue bitwise", "[mpi][e2e]") {
    auto world = comm::world_process_group();
    const fs::path dir = shared_dir(*world, "same");
    const Config config = make_config(
        "{sharding_type: row_wise, tables: [{name: avg, sharding_type: table_wise}, "
        "{name: shared, sharding_type: data_parallel}]}",
        4);
    train::Trainer straight(config, world);
    const auto straight_losses = train_steps(straight, 0, 6);

    train::Trainer first(config, world);
    auto losses = train_steps(first, 0, 3);
    train::save_checkpoint(first, dir.string(), 3, 2);
    train::Trainer resumed(config, world);
    REQUIRE(train::load_checkpoint(resumed, dir.string(), {true}) == 3);
    const auto more = train_steps(resumed, 3, 6);
    losses.insert(losses.end(), more.begin(), more.end());
    CHECK(losses == straight_losses);  // bitwise
    for (int64_t t = 0; t < 3; ++t) {
        CHECK(unsharded(resumed, t, -1) == unsharded(straight, t, -1));
        CHECK(unsharded(resumed, t, 0) == unsharded(straight, t, 0));
    }
    const auto a = resumed.model().parameters(), b = straight.model().parameters();
    for (size_t i = 0; i < a.size(); ++i)
        CHECK(a[i]->value.to_vector<float>() == b[i]->value.to_vector<float>());
}

TEST_CASE("checkpoint resume: row_wise on W ranks loads as table_wise on W/2", "[mpi][e2e]") {
    check_reshard("{sharding_type: row_wise}", "{sharding_type: table_wise}");
}

TEST_CASE("checkpoint resume: table_wise loads as column_wise", "[mpi][e2e]") {
    check_reshard("{sharding_type: table_wise}", "{sharding_type: column_wise}");
}

TEST_CASE("checkpoint resume: data_parallel and table_row_wise load as row_wise", "[mpi][e2e]") {
    check_reshard(
        "{sharding_type: table_row_wise, tables: [{name: shared, sharding_type: data_parallel}]}",
        "{sharding_type: row_wise}");
}

TEST_CASE("checkpoint export: npy and safetensors hold the trained unsharded tables",
          "[mpi][e2e]") {
    auto world = comm::world_process_group();
    const fs::path dir = shared_dir(*world, "export");
    const Config config = make_config(
        "{sharding_type: row_wise, tables: [{name: avg, sharding_type: column_wise}]}", 4);
    train::Trainer trainer(config, world);
    (void)train_steps(trainer, 0, 2);
    const std::string ckpt = train::save_checkpoint(trainer, dir.string(), 2, 1);
    auto& ebc = dynamic_cast<ShardedEmbeddingBagCollection&>(trainer.model().sparse_arch());
    std::vector<std::vector<float>> tables;
    for (int64_t t = 0; t < 3; ++t)
        tables.push_back(ebc.unsharded_weight(t).to_vector<float>());  // collective
    if (world->rank() == 0) {
        train::export_checkpoint(ckpt, "npy", (dir / "npy").string());
        train::export_checkpoint(ckpt, "safetensors", (dir / "st").string());
        const std::vector<char> st = read_bytes(dir / "st" / "model.safetensors");
        uint64_t header = 0;
        std::memcpy(&header, st.data(), 8);
        const std::string json(st.data() + 8, header);
        for (int64_t t = 0; t < 3; ++t) {
            const auto& table = config.model.tables[static_cast<size_t>(t)];
            const std::string name = train::table_export_name(table.name);
            INFO(name);
            // npy: magic, version 1.0, u16 header length, header, data.
            const std::vector<char> npy = read_bytes(dir / "npy" / (name + ".npy"));
            REQUIRE(npy.size() > 10);
            REQUIRE(std::string(npy.data(), 6) == "\x93NUMPY");
            const size_t len = static_cast<uint8_t>(npy[8]) | (static_cast<uint8_t>(npy[9]) << 8);
            const std::string head(npy.data() + 10, len);
            CHECK((10 + len) % 64 == 0);
            CHECK(head.find("'descr': '<f4'") != std::string::npos);
            CHECK(head.find("'shape': (" + std::to_string(table.num_embeddings) + ", 8)") !=
                  std::string::npos);
            REQUIRE(npy.size() == 10 + len + tables[static_cast<size_t>(t)].size() * 4);
            std::vector<float> values(tables[static_cast<size_t>(t)].size());
            std::memcpy(values.data(), npy.data() + 10 + len, values.size() * 4);
            CHECK(values == tables[static_cast<size_t>(t)]);
            // safetensors: u64 header size, JSON header, data at data_offsets.
            const std::string key = "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" +
                                    std::to_string(table.num_embeddings) + ",8],\"data_offsets\":[";
            const size_t at = json.find(key);
            REQUIRE(at != std::string::npos);
            const uint64_t begin = std::stoull(json.substr(at + key.size()));
            std::memcpy(values.data(), st.data() + 8 + header + begin, values.size() * 4);
            CHECK(values == tables[static_cast<size_t>(t)]);
        }
        const auto params = trainer.model().parameters();
        const std::vector<char> w0 = read_bytes(dir / "npy" / (params[0]->name + ".npy"));
        const size_t len = static_cast<uint8_t>(w0[8]) | (static_cast<uint8_t>(w0[9]) << 8);
        std::vector<float> values(static_cast<size_t>(params[0]->value.numel()));
        REQUIRE(w0.size() == 10 + len + values.size() * 4);
        std::memcpy(values.data(), w0.data() + 10 + len, values.size() * 4);
        CHECK(values == params[0]->value.to_vector<float>());
    }
    world->barrier().wait();
}
