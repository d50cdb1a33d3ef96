// The memory check before a run allocates: each rank's planned bytes (tables with their optimizer
// state, buffers, dense part), and the refusal when they do not fit, with numbers.
#include <catch2/catch.hpp>

#include "engine/core/error.h"
#include "engine/distributed/memory_check.h"
#include "engine/modules/managed_collision.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

constexpr double kGiB = 1073741824.0;

// A 1,000,000 x 64 f32 table and a small one, rowwise_adagrad (4 bytes of state per row).
Config two_tables(const std::string& extra = "") {
    return parse_config(R"(train: {steps: 1}
data: {batch_size: 128}
model:
  type: dlrm
  embedding_dim: 64
  bottom_mlp: [64]
  top_mlp: [1]
  tables:
    - {name: small, num_embeddings: 1000}
    - {name: big, num_embeddings: 1000000}
optimizer: {sparse: {type: rowwise_adagrad}}
)" + extra,
                        {});
}

RankMemory rank_of(double table_gib, double buffers_gib = 0.0, double dense_gib = 0.0) {
    RankMemory r;
    r.tables = {{"big", table_gib * kGiB}};
    r.tables_bytes = table_gib * kGiB;
    r.buffers_bytes = buffers_gib * kGiB;
    r.dense_bytes = dense_gib * kGiB;
    return r;
}

AvailableMemory avail(double gib, const std::string& by) {
    return AvailableMemory{static_cast<int64_t>(gib * kGiB), by};
}

}  // namespace

TEST_CASE("plan_rank_memory: one process holds every table with its optimizer state", "[memory]") {
    const std::vector<RankMemory> ranks = plan_rank_memory(two_tables(), 1, 1);
    REQUIRE(ranks.size() == 1);
    const RankMemory& r = ranks[0];
    REQUIRE(r.tables.size() == 2);
    CHECK(r.tables[0].name == "big");  // largest first
    CHECK(r.tables[0].bytes == 1000000.0 * (64 * 4 + 4));
    CHECK(r.tables[1].bytes == 1000.0 * (64 * 4 + 4));
    CHECK(r.tables_bytes == r.tables[0].bytes + r.tables[1].bytes);
    CHECK(r.buffers_bytes > 0);  // ids and pooled rows of the batch
    CHECK(r.dense_bytes > 0);    // parameters, gradients, state, activations
    // Doubling the batch grows the buffers and activations, not the tables.
    Config doubled = two_tables();
    doubled.data.batch_size = 256;
    const RankMemory r2 = plan_rank_memory(doubled, 1, 1)[0];
    CHECK(r2.tables_bytes == r.tables_bytes);
    CHECK(r2.buffers_bytes > r.buffers_bytes);
    CHECK(r2.dense_bytes > r.dense_bytes);
}

TEST_CASE("plan_rank_memory: several ranks follow the sharding plan", "[memory]") {
    const Config config = two_tables(R"(sharding:
  tables:
    - {name: big, sharding_type: row_wise}
    - {name: small, sharding_type: table_wise, ranks: [1]}
)");
    const std::vector<RankMemory> ranks = plan_rank_memory(config, 2, 2);
    REQUIRE(ranks.size() == 2);
    CHECK(ranks[0].tables.size() == 1);
    CHECK(ranks[0].tables[0].bytes == 500000.0 * (64 * 4 + 4));
    REQUIRE(ranks[1].tables.size() == 2);
    CHECK(ranks[1].tables[0].name == "big");
    CHECK(ranks[1].tables_bytes == 501000.0 * (64 * 4 + 4));
}

// A managed table's slot map lives with its buckets: one process keeps it all, two ranks of a
// row_wise table with 4 buckets two buckets each; its bytes are in the refusal.
TEST_CASE("plan_rank_memory: managed-collision slot maps on the buckets' owners", "[memory]") {
    const std::string mc = R"(sharding:
  tables:
    - {name: big, sharding_type: row_wise}
)";
    Config config = two_tables(mc);
    config.model.tables[1].managed_collision.zch_size = 1000000;
    const double one = static_cast<double>(MCHManagedCollisionModule::slot_bytes(1000000));
    CHECK(one >= 1000000.0 * (2 * 32 + 8));  // at least twice the slots in 32-byte cells
    CHECK(plan_rank_memory(config, 1, 1)[0].remap_bytes == one);
    CHECK(plan_rank_memory(config, 2, 2)[0].remap_bytes == one);  // one bucket: rank 0
    CHECK(plan_rank_memory(config, 2, 2)[1].remap_bytes == 0);
    config.model.tables[1].managed_collision.total_num_buckets = 4;
    const double quarter = static_cast<double>(MCHManagedCollisionModule::slot_bytes(250000));
    const std::vector<RankMemory> ranks = plan_rank_memory(config, 2, 2);
    CHECK(ranks[0].remap_bytes == 2 * quarter);
    CHECK(ranks[1].remap_bytes == 2 * quarter);
    CHECK(ranks[0].total_bytes() >
          ranks[0].tables_bytes + ranks[0].buffers_bytes + ranks[0].dense_bytes);
    CHECK_THAT(memory_problem(ranks, 0, 1, {-1, ""}, {1, "a test's limit"}, 128),
               Contains("managed-collision slot maps"));
    config.runtime.device = "cuda";  // the host's memory is not what a GPU run checks
    CHECK(plan_rank_memory(config, 2, 2)[0].remap_bytes == 0);
}

TEST_CASE("plan_rank_memory: a 1e12-row table is counted, not overflowed", "[memory]") {
    Config config = two_tables();
    config.model.tables[1].num_embeddings = 1000000000000;
    const RankMemory r = plan_rank_memory(config, 1, 1)[0];
    CHECK(r.tables[0].bytes == 1e12 * (64 * 4 + 4));
}

TEST_CASE("memory_problem: a plan that fits passes, one that does not names rank, bytes, tables",
          "[memory]") {
    const std::vector<RankMemory> one{rank_of(6.0, 0.5, 0.5)};
    CHECK(memory_problem(one, 0, 1, avail(8.0, "MemAvailable"), {}, 256).empty());
    CHECK(memory_problem(one, 0, 1, {}, {}, 256).empty());  // nothing known: no refusal

    const std::string p = memory_problem(one, 0, 1, avail(4.0, "MemAvailable"), {}, 256);
    CHECK_THAT(p, Contains("rank 0 needs 7.0 GiB but only 4.0 GiB is available") &&
                      Contains("(MemAvailable)") && Contains("'big' 6.0 GiB") &&
                      Contains("(batch size 256)"));

    // RLIMIT_AS is the process's own: it wins when tighter than the machine.
    const std::string q =
        memory_problem(one, 0, 1, avail(100.0, "MemAvailable"), avail(2.0, "RLIMIT_AS"), 64);
    CHECK_THAT(q,
               Contains("only 2.0 GiB") && Contains("(RLIMIT_AS)") && Contains("(batch size 64)"));
}

TEST_CASE("memory_problem: the ranks of a node share its memory", "[memory]") {
    // Two ranks per node, 6 GiB each, 10 GiB free on the node: neither fits beside the other.
    const std::vector<RankMemory> ranks{rank_of(6.0), rank_of(6.0), rank_of(1.0), rank_of(1.0)};
    const std::string p = memory_problem(ranks, 1, 2, avail(10.0, "MemAvailable"), {}, 128);
    CHECK_THAT(
        p,
        Contains("rank 1 needs 6.0 GiB but only 4.0 GiB") &&
            Contains("(10.0 GiB of MemAvailable, less 6.0 GiB for the other 1 rank on this node)"));
    // The second node's ranks need 2 GiB together.
    CHECK(memory_problem(ranks, 2, 2, avail(10.0, "MemAvailable"), {}, 128).empty());
    // One rank per node: each has the node to itself.
    CHECK(memory_problem(ranks, 1, 1, avail(10.0, "MemAvailable"), {}, 128).empty());
}

TEST_CASE("check_memory_fits: this machine refuses a 1e10 x 128 table, takes a small one",
          "[memory]") {
    Config config = two_tables();
    CHECK_NOTHROW(check_memory_fits(config, 1, 1, 0, Device::cpu()));
    config.model.tables[1].num_embeddings = 10000000000;
    config.model.tables[1].embedding_dim = 128;
    try {
        check_memory_fits(config, 1, 1, 0, Device::cpu());
        FAIL("no error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Contains("rank 0 needs 4.7 TiB") && Contains("'big' 4.7 TiB"));
    }
}
