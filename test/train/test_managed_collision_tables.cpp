// ManagedCollisionTables, the trainer's side of managed collision: the rows of evicted slots get
// their initial values and a zero optimizer state (and no other row changes), and a table whose
// slots hold every id trains bitwise as the plain table given those ids remapped offline.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <tuple>

#include "engine/modules/embedding_config.h"
#include "engine/modules/model.h"
#include "engine/train/managed_collision_tables.h"
#include "engine/train/trainer.h"
#include "kernels/threads.h"

using namespace shardrec;

namespace {

const char* const kConfig = R"(
train: {steps: 6, seed: 5, log_every: 1, eval_samples: 64}
data: {type: synthetic, batch_size: 64}
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  tables:
    - {name: a, num_embeddings: 50, pooling_factor: 2}
    - {name: b, num_embeddings: 300}
optimizer:
  dense: {type: adagrad, learning_rate: 0.05}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
)";

// A batch of feature f_b only, one id a sample.
Batch ids_batch(const std::vector<int64_t>& ids) {
    const auto n = static_cast<int64_t>(ids.size());
    Tensor values = Tensor::empty({n}, DType::kI64);
    std::copy(ids.begin(), ids.end(), values.data<int64_t>());
    Tensor lengths = Tensor::empty({n}, DType::kI64);
    std::fill(lengths.data<int64_t>(), lengths.data<int64_t>() + n, int64_t{1});
    Batch b;
    b.sparse = KeyedJaggedTensor::from_lengths_sync({"f_b"}, values, lengths);
    return b;
}

}  // namespace

TEST_CASE("ManagedCollisionTables: evicted rows get their initial values and zero state",
          "[train][mc]") {
    const Config config = parse_config(kConfig, {"model.tables[1].managed_collision.zch_size=4",
                                                 "model.tables[1].managed_collision.mch_size=296"});
    const uint64_t seed = 5;
    auto ebc = make_embedding_bag_collection(config.model, seed,
                                             sparse_optimizer_params(config.optimizer.sparse));
    train::ManagedCollisionTables mc(config.model, seed);
    REQUIRE(mc.size() == 1);
    // Step 1 fills the 4 slots; then every row and state gets a value no init gives.
    const Batch first = mc.remap_train(ids_batch({11, 12, 13, 14}), *ebc, Stream::cpu());
    std::vector<EmbeddingShardState> shards = ebc->shard_states();
    REQUIRE(shards.size() == 2);
    EmbeddingShardState& b = shards[1];
    REQUIRE(b.table == 1);
    float* w = b.weight.data<float>();
    float* g = b.optimizer_state.at(0).data<float>();  // rowwise: [rows]
    std::fill(w, w + b.weight.numel(), 7.0f);
    std::fill(g, g + b.optimizer_state[0].numel(), 1.0f);
    // Step 2: 20 and 21 (twice each) take the slots of the least used ids (lfu).
    const std::vector<int64_t> before = {11, 12, 13, 14};
    std::vector<int64_t> slot_before;
    for (int64_t id : before)
        slot_before.push_back(mc.module(0).slot_of(id));
    const Batch second = mc.remap_train(ids_batch({11, 12, 20, 20, 21, 21}), *ebc, Stream::cpu());
    std::set<int64_t> evicted;
    for (size_t i = 0; i < before.size(); ++i) {
        if (mc.module(0).slot_of(before[i]) != slot_before[i])
            evicted.insert(slot_before[i]);
    }
    REQUIRE(evicted.size() == 2);
    CHECK(evicted.count(mc.module(0).slot_of(20)) == 1);
    CHECK(evicted.count(mc.module(0).slot_of(21)) == 1);
    for (int64_t r = 0; r < b.rows; ++r) {
        INFO("row " << r);
        if (evicted.count(r) == 0) {
            CHECK(g[r] == 1.0f);
            CHECK(w[r * 4] == 7.0f);
            continue;
        }
        Tensor init = Tensor::empty({1, 4}, DType::kF32);
        init_embedding_rows(init, seed, 1, r, 0, 300);
        CHECK(g[r] == 0.0f);
        for (int c = 0; c < 4; ++c)
            CHECK(w[r * 4 + c] == init.data<float>()[c]);
    }
    // The batch reads the new owners' rows; table a's features would pass unchanged.
    CHECK(second.sparse.values().data<int64_t>()[2] == mc.module(0).slot_of(20));
    CHECK(first.sparse.values().data<int64_t>()[0] == slot_before[0]);
}

TEST_CASE("ManagedCollisionTables: each record's hit_fraction is the interval's ids in own slots",
          "[train][mc]") {
    const Config config =
        parse_config(kConfig, {"model.tables[1].managed_collision.zch_size=4",
                               "model.tables[1].managed_collision.mch_size=296",
                               "model.tables[1].managed_collision.eviction_interval=2"});
    auto ebc = make_embedding_bag_collection(config.model, 5,
                                             sparse_optimizer_params(config.optimizer.sparse));
    train::ManagedCollisionTables mc(config.model, 5);
    // Step 1: 11..14 take the 4 free slots, 15 and 16 go to the residual rows (4 of 6 ids).
    // Step 2 (an eviction pass): 11, the most used id, keeps its slot (2 of 2).
    mc.remap_train(ids_batch({16, 15, 14, 13, 12, 11}), *ebc, Stream::cpu());
    CHECK(mc.take_records().empty());
    mc.remap_train(ids_batch({11, 11}), *ebc, Stream::cpu());
    std::vector<train::ManagedCollisionRecord> records = mc.take_records();
    REQUIRE(records.size() == 1);
    CHECK(records[0].hit_fraction == 0.75);
    // The next interval counts afresh: 11 alone, always in its slot.
    mc.remap_train(ids_batch({11}), *ebc, Stream::cpu());
    mc.remap_train(ids_batch({11, 11, 11}), *ebc, Stream::cpu());
    records = mc.take_records();
    REQUIRE(records.size() == 1);
    CHECK(records[0].hit_fraction == 1.0);
}

TEST_CASE("Trainer: a managed table that holds every id trains as the table on remapped ids",
          "[train][mc]") {
    // 299 usable slots (the last is the fallback) for the few distinct Zipf ids of 6 batches:
    // no eviction, so each id keeps the slot it first took.
    const Config mc_config = parse_config(
        kConfig, {"model.tables[1].managed_collision.zch_size=300", "train.pipeline=base"});
    const Config plain_config = parse_config(kConfig, {"train.pipeline=base"});
    train::Trainer mc(mc_config, nullptr);
    train::Trainer plain(plain_config, nullptr);
    std::vector<Batch> batches;
    std::vector<float> mc_losses, plain_losses;
    for (int s = 0; s < 6; ++s) {
        batches.push_back(mc.train_batch(s));
        mc_losses.push_back(mc.train_step(batches.back(), s).loss);
    }
    const MCHManagedCollisionModule& m = mc.managed_collision().module(0);
    REQUIRE(m.evictions_total() == 0);
    REQUIRE(m.occupancy() < m.usable_slots());
    for (int s = 0; s < 6; ++s) {
        // Offline: table b's ids to their slots, the same batch otherwise.
        Batch batch = batches[static_cast<size_t>(s)];
        const KeyedJaggedTensor& kjt = batch.sparse;
        Tensor values = kjt.values().clone();
        int64_t* v = values.data<int64_t>();
        for (int64_t f = 0; f < kjt.num_keys(); ++f) {
            if (kjt.keys()[f] != "f_b")
                continue;
            for (int64_t n = kjt.offset_per_key()[f]; n < kjt.offset_per_key()[f + 1]; ++n)
                v[n] = m.slot_of(v[n]);
        }
        batch.sparse =
            KeyedJaggedTensor::from_offsets_sync(kjt.keys(), values, kjt.offsets(), std::nullopt);
        plain_losses.push_back(plain.train_step(batch, s).loss);
    }
    CHECK(mc_losses == plain_losses);
}

TEST_CASE("ManagedCollisionTables: buckets split the ids by hash, each into its own rows",
          "[train][mc]") {
    // 4 buckets of 75 rows: 50 slots, then 25 residual rows each. 100 ids, each 50 times (so the
    // route bins them on the threads), then one more equal to id 7 modulo input_hash_size.
    const Config config =
        parse_config(kConfig, {"model.tables[1].managed_collision.zch_size=200",
                               "model.tables[1].managed_collision.mch_size=100",
                               "model.tables[1].managed_collision.total_num_buckets=4",
                               "model.tables[1].managed_collision.input_hash_size=1000"});
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 5000; ++i)
        ids.push_back(i % 100);
    ids.push_back(1007);
    for (const int threads : {1, 2}) {
        kernels::set_cpu_threads(threads);
        auto ebc = make_embedding_bag_collection(config.model, 5,
                                                 sparse_optimizer_params(config.optimizer.sparse));
        train::ManagedCollisionTables mc(config.model, 5);
        REQUIRE(mc.num_buckets(0) == 4);
        const Batch out = mc.remap_train(ids_batch(ids), *ebc, Stream::cpu());
        const int64_t* rows = out.sparse.values().data<int64_t>();
        std::vector<int64_t> per_bucket(4, 0);
        std::set<int64_t> distinct;
        for (size_t i = 0; i < ids.size(); ++i) {
            const int64_t b = managed_collision_bucket(ids[i], 1000, 4);
            const MCHManagedCollisionModule& m = mc.module(0, b);
            INFO(threads << " threads: id " << ids[i] << " bucket " << b << " row " << rows[i]);
            CHECK(m.options().output_global_offset == 75 * b);
            CHECK(m.options().zch_size == 50);
            CHECK(m.options().mch_size == 25);
            // Under 50 ids a bucket: each has a slot of its own bucket.
            CHECK(rows[i] == 75 * b + m.slot_of(ids[i]));
            CHECK(m.slot_of(ids[i]) >= 0);
            ++per_bucket[static_cast<size_t>(b)];
            distinct.insert(rows[i]);
        }
        CHECK(rows[ids.size() - 1] == rows[7]);
        CHECK(distinct.size() == 100);
        int64_t occupancy = 0;
        for (int64_t b = 0; b < 4; ++b) {
            CHECK(per_bucket[static_cast<size_t>(b)] > 500);  // sequential ids spread
            occupancy += mc.module(0, b).occupancy();
            CHECK(mc.module(0, b).step() == 1);  // every bucket steps with the batch
        }
        CHECK(occupancy == 100);
    }
}

TEST_CASE("ManagedCollisionTables: one process remaps a table's features as its module does",
          "[train][mc]") {
    // Table a has one feature (remapped in place); table b two, b1 and b2, with f_a between them
    // (their ids gathered, remapped together, and put back); table c is not managed (its ids
    // pass as they are).
    std::string yaml = kConfig;
    const std::string b_line = "    - {name: b, num_embeddings: 300}\n";
    yaml.replace(yaml.find(b_line), b_line.size(),
                 b_line + "    - {name: c, num_embeddings: 20}\n");
    const Config config =
        parse_config(yaml, {"model.tables[0].managed_collision.zch_size=6",
                            "model.tables[0].managed_collision.mch_size=44",
                            "model.tables[0].managed_collision.eviction_interval=2",
                            "model.tables[1].feature_names=[b1, b2]",
                            "model.tables[1].managed_collision.zch_size=5",
                            "model.tables[1].managed_collision.mch_size=295",
                            "model.tables[1].managed_collision.eviction_interval=2"});
    auto ebc = make_embedding_bag_collection(config.model, 5,
                                             sparse_optimizer_params(config.optimizer.sparse));
    train::ManagedCollisionTables mc(config.model, 5);
    MCHManagedCollisionModule ref_a("a",
                                    train::managed_collision_options(config.model.tables[0], 5));
    MCHManagedCollisionModule ref_b("b",
                                    train::managed_collision_options(config.model.tables[1], 5));
    for (int64_t step = 0; step < 5; ++step) {
        // 4 samples a feature, one id each; a: 8 distinct ids, b: 10 over its two features.
        std::vector<int64_t> b1, a1, b2;
        for (int64_t s = 0; s < 4; ++s) {
            b1.push_back(2000 + (step * 5 + s) % 10);
            a1.push_back(1000 + (step * 3 + s) % 8);
            b2.push_back(2000 + (step * 7 + s * 3) % 10);
        }
        const std::vector<int64_t> c1{3 + step, 7, 11, 19 - step};
        std::vector<int64_t> values = b1;
        values.insert(values.end(), a1.begin(), a1.end());
        values.insert(values.end(), b2.begin(), b2.end());
        values.insert(values.end(), c1.begin(), c1.end());
        Batch batch;
        batch.sparse = KeyedJaggedTensor::from_lengths_sync(
            {"b1", "f_a", "b2", "f_c"}, Tensor::from_vector(values),
            Tensor::from_vector(std::vector<int64_t>(16, 1)));
        const Batch out = mc.remap_train(batch, *ebc, Stream::cpu());
        const int64_t* rows = out.sparse.values().data<int64_t>();
        CHECK(std::vector<int64_t>(rows + 12, rows + 16) == c1);
        std::vector<int64_t> want_a(4), want_b(8), b_ids = b1;
        b_ids.insert(b_ids.end(), b2.begin(), b2.end());
        ref_a.forward(a1.data(), 4, want_a.data());
        ref_b.forward(b_ids.data(), 8, want_b.data());
        INFO("step " << step);
        CHECK(std::vector<int64_t>(rows + 4, rows + 8) == want_a);
        CHECK(std::vector<int64_t>(rows, rows + 4) ==
              std::vector<int64_t>(want_b.begin(), want_b.begin() + 4));
        CHECK(std::vector<int64_t>(rows + 8, rows + 12) ==
              std::vector<int64_t>(want_b.begin() + 4, want_b.end()));
    }
}

TEST_CASE("ManagedCollisionTables: a table of two buckets over two features remaps as its modules",
          "[train][mc]") {
    // Table b's features b1 and b2 come after f_a's, so their ids sit at other places in the
    // batch than in the route's list of them; 3000 ids each, so two threads split the list
    // inside b1. Each bucket's module sees the ids of its bucket in batch order.
    const Config config =
        parse_config(kConfig, {"model.tables[0].managed_collision.zch_size=6",
                               "model.tables[0].managed_collision.mch_size=44",
                               "model.tables[1].feature_names=[b1, b2]",
                               "model.tables[1].managed_collision.zch_size=100",
                               "model.tables[1].managed_collision.mch_size=200",
                               "model.tables[1].managed_collision.total_num_buckets=2",
                               "model.tables[1].managed_collision.eviction_interval=2"});
    for (const int threads : {1, 2}) {
        kernels::set_cpu_threads(threads);
        auto ebc = make_embedding_bag_collection(config.model, 5,
                                                 sparse_optimizer_params(config.optimizer.sparse));
        train::ManagedCollisionTables mc(config.model, 5);
        std::vector<MCHManagedCollisionModule> ref;
        for (int64_t b = 0; b < 2; ++b)
            ref.emplace_back("b", train::managed_collision_options(config.model.tables[1], 5, b));
        for (int64_t step = 0; step < 3; ++step) {
            std::vector<int64_t> values;
            for (int64_t i = 0; i < 6100; ++i)  // f_a: 100 ids, then b1 and b2: 3000 each
                values.push_back(i < 100 ? 1000 + i % 8 : 5000 + (i * 7 + step * 13) % 997);
            Batch batch;
            batch.sparse = KeyedJaggedTensor::from_lengths_sync(
                {"f_a", "b1", "b2"}, Tensor::from_vector(values),
                Tensor::from_vector(std::vector<int64_t>{100, 3000, 3000}));
            const Batch out = mc.remap_train(batch, *ebc, Stream::cpu());
            const int64_t* rows = out.sparse.values().data<int64_t>();
            std::vector<std::vector<int64_t>> ids(2), at(2);
            for (size_t i = 100; i < values.size(); ++i) {
                const int64_t b = managed_collision_bucket(values[i], uint64_t{1} << 63, 2);
                ids[static_cast<size_t>(b)].push_back(values[i]);
                at[static_cast<size_t>(b)].push_back(static_cast<int64_t>(i));
            }
            int64_t wrong = 0;
            for (size_t b = 0; b < 2; ++b) {
                std::vector<int64_t> want(ids[b].size());
                ref[b].forward(ids[b].data(), static_cast<int64_t>(ids[b].size()), want.data());
                for (size_t j = 0; j < want.size(); ++j)
                    wrong += rows[at[b][j]] != want[j] ? 1 : 0;
            }
            INFO(threads << " threads, step " << step);
            CHECK(ids[0].size() > 2000);
            CHECK(ids[1].size() > 2000);
            CHECK(wrong == 0);
        }
    }
    kernels::set_cpu_threads(2);
}

TEST_CASE("bucket_owner: the rank that holds the bucket's first row at column 0", "[train][mc]") {
    ParameterSharding rw;
    rw.sharding_type = ShardingType::kRowWise;
    rw.ranks = {0, 1};
    rw.sharding_spec = {ShardMetadata{{0, 0}, {500, 8}, 0}, ShardMetadata{{500, 0}, {500, 8}, 1}};
    CHECK(bucket_owner(rw, 0, 0) == 0);
    CHECK(bucket_owner(rw, 250, 1) == 0);
    CHECK(bucket_owner(rw, 500, 2) == 1);
    CHECK(bucket_owner(rw, 750, 3) == 1);
    ParameterSharding cw;
    cw.sharding_type = ShardingType::kColumnWise;
    cw.ranks = {2, 1};
    cw.sharding_spec = {ShardMetadata{{0, 0}, {1000, 4}, 2}, ShardMetadata{{0, 4}, {1000, 4}, 1}};
    for (int64_t b = 0; b < 4; ++b)
        CHECK(bucket_owner(cw, 250 * b, b) == 2);
    ParameterSharding dp;
    dp.sharding_type = ShardingType::kDataParallel;
    dp.ranks = {0, 1, 2, 3};
    for (int64_t b = 0; b < 8; ++b)
        CHECK(bucket_owner(dp, 125 * b, b) == b % 4);
    CHECK_THROWS_WITH(bucket_owner(rw, 1000, 0), Catch::Contains("row 1000"));
}

TEST_CASE("ManagedCollisionTables: buckets stepped on 1 or 2 threads give the same rows and state",
          "[train][mc]") {
    // 4 buckets of 5 slots (the last a fallback) for 40 ids a step from 200: evictions every 2.
    const Config config =
        parse_config(kConfig, {"model.tables[1].managed_collision.zch_size=20",
                               "model.tables[1].managed_collision.mch_size=280",
                               "model.tables[1].managed_collision.total_num_buckets=4",
                               "model.tables[1].managed_collision.eviction_interval=2"});
    const auto run = [&](int threads) {
        kernels::set_cpu_threads(threads);
        auto ebc = make_embedding_bag_collection(config.model, 5,
                                                 sparse_optimizer_params(config.optimizer.sparse));
        train::ManagedCollisionTables mc(config.model, 5);
        std::vector<int64_t> rows;
        for (int s = 0; s < 8; ++s) {
            std::vector<int64_t> ids;
            for (int i = 0; i < 40; ++i)
                ids.push_back((s * 37 + i * i) % 200);
            const Batch out = mc.remap_train(ids_batch(ids), *ebc, Stream::cpu());
            const int64_t* v = out.sparse.values().data<int64_t>();
            rows.insert(rows.end(), v, v + 40);
        }
        int64_t evictions = 0;
        for (const auto& rec : mc.take_records())
            evictions += rec.evictions;
        std::vector<int64_t> state;
        for (int64_t b = 0; b < 4; ++b) {
            const Tensor t = mc.state_tensor(0, b);
            state.insert(state.end(), t.data<int64_t>(), t.data<int64_t>() + t.numel());
        }
        const Tensor w = ebc->shard_states()[1].weight;
        std::vector<float> weights(w.data<float>(), w.data<float>() + w.numel());
        return std::make_tuple(rows, evictions, state, weights);
    };
    const auto one = run(1);
    const auto two = run(2);
    CHECK(std::get<1>(one) > 0);
    CHECK(std::get<0>(one) == std::get<0>(two));
    CHECK(std::get<1>(one) == std::get<1>(two));
    CHECK(std::get<2>(one) == std::get<2>(two));
    CHECK(std::get<3>(one) == std::get<3>(two));
}
