// Managed-collision tables end to end with the real binary: raw ids from a drifting vocabulary
// (data.synthetic.raw_id_drift) go through the table's remap, slots are evicted and reset, the
// remap state is checkpointed: N steps, --resume, N more equals 2N straight, evictions after the
// resume included. 1, 2 and 4 ranks give the same slots and training.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "engine/modules/managed_collision.h"
#include "engine/train/checkpoint.h"
#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// The quickstart model with table t4 (1000 rows, 3 ids a bag) managed: 100 zch slots, 900
// residual rows, an eviction pass every 2 steps, a new raw id every 4 samples.
std::vector<std::string> mc_args(const fs::path& run, int steps) {
    return {"train", (repo_root() / "configs" / "quickstart.yaml").string(),
            "--out", run.string(),
            "--set", "train.steps=" + std::to_string(steps),
            "--set", "train.log_every=1",
            "--set", "train.eval_every=4",
            "--set", "train.eval_samples=256",
            "--set", "data.batch_size=16",
            "--set", "train.checkpoint_every=4",
            "--set", "data.synthetic.raw_id_drift=4",
            "--set", "model.tables[4].managed_collision.zch_size=100",
            "--set", "model.tables[4].managed_collision.mch_size=900",
            "--set", "model.tables[4].managed_collision.eviction_interval=2"};
}

// metrics.jsonl lines from step `from` on, without timings.
std::vector<std::string> numbers(const fs::path& run, int from) {
    std::vector<std::string> out;
    for (const auto& r : read_metrics(run)) {
        const auto step = r.find("step");
        if (step == r.end() || std::stoi(step->second) < from)
            continue;
        std::string line = r.at("kind") + " " + step->second;
        for (const char* key : {"loss", "lr", "auc", "ne", "occupancy", "slots", "evictions",
                                "admissions", "hit_fraction"}) {
            if (r.count(key))
                line += std::string(" ") + key + "=" + r.at(key);
        }
        out.push_back(line);
    }
    return out;
}

std::map<std::string, uint32_t> crcs(const fs::path& ckpt) {
    std::map<std::string, uint32_t> out;
    for (const auto& f : shardrec::train::read_manifest(ckpt.string()).files)
        out[f.path] = f.crc32;
    return out;
}

// The rows [num_embeddings * dim] of a table in a checkpoint, put together from its shards.
std::vector<float> table_rows(const fs::path& ckpt, const std::string& name) {
    for (const auto& t : shardrec::train::read_manifest(ckpt.string()).tables) {
        if (t.name != name)
            continue;
        std::vector<float> out(static_cast<size_t>(t.num_embeddings * t.embedding_dim));
        for (const auto& s : t.shards) {
            std::ifstream in(ckpt / s.files.at(0), std::ios::binary);
            std::vector<float> w(static_cast<size_t>(s.rows * s.cols));
            in.read(reinterpret_cast<char*>(w.data()),
                    static_cast<std::streamsize>(w.size() * sizeof(float)));
            REQUIRE(in);
            for (int64_t r = 0; r < s.rows; ++r) {
                std::copy_n(w.begin() + r * s.cols, s.cols,
                            out.begin() + (s.row_offset + r) * t.embedding_dim + s.col_offset);
            }
        }
        return out;
    }
    FAIL("checkpoint " << ckpt << " has no table " << name);
    return {};
}

// The export's map of t4: (raw id, row) pairs, `slots` of them.
std::vector<int64_t> id_to_row(const fs::path& export_dir, int64_t slots) {
    const std::string npy = read_file(export_dir / "managed_collision" / "t4.id_to_row.npy");
    REQUIRE(npy.size() > 128);
    CHECK_THAT(npy.substr(0, 128), Contains("'descr': '<i8'"));
    CHECK_THAT(npy.substr(0, 128), Contains("'shape': (" + std::to_string(slots) + ", 2)"));
    REQUIRE(npy.size() == 128 + static_cast<size_t>(slots) * 16);
    std::vector<int64_t> map(static_cast<size_t>(slots) * 2);
    std::memcpy(map.data(), npy.data() + 128, map.size() * 8);
    return map;
}

}  // namespace

TEST_CASE("managed collision e2e: a table trains on raw ids, evicts, and resumes exactly",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_resume");
    const RunResult straight = run_shardrec(mc_args(dir / "straight", 8));
    INFO(straight.output);
    REQUIRE(straight.exit_code == 0);
    int64_t evictions_after_4 = 0, records = 0;
    for (const auto& r : read_metrics(dir / "straight")) {
        if (r.at("kind") != "managed_collision")
            continue;
        ++records;
        CHECK(r.at("table") == "t4");
        CHECK(std::stoi(r.at("step")) % 2 == 0);
        CHECK(r.at("slots") == "100");
        // 100 slots for a vocabulary of new ids every 4 samples: once they are full some ids
        // find their slot, not all.
        CHECK(std::stod(r.at("hit_fraction")) > 0.0);
        CHECK(std::stod(r.at("hit_fraction")) <= 1.0);
        if (std::stoi(r.at("step")) > 4) {
            evictions_after_4 += std::stoll(r.at("evictions"));
            CHECK(std::stod(r.at("hit_fraction")) < 1.0);
        }
    }
    CHECK(records == 4);  // steps 2, 4, 6, 8
    CHECK(evictions_after_4 > 0);
    // The default pipeline (sparse_dist) remaps each batch while the one before trains, and
    // resets the rows it evicts before the batch's own forward; it drains before each checkpoint
    // and evaluation: the numbers, their order and the checkpoints are the base pipeline's.
    auto base_args = mc_args(dir / "base", 8);
    base_args.insert(base_args.end(), {"--set", "train.pipeline=base"});
    const RunResult base = run_shardrec(base_args);
    INFO(base.output);
    REQUIRE(base.exit_code == 0);
    CHECK(numbers(dir / "straight", 0) == numbers(dir / "base", 0));
    for (const char* step : {"step-00000004", "step-00000008"})
        CHECK(crcs(dir / "straight" / "checkpoints" / step) ==
              crcs(dir / "base" / "checkpoints" / step));
    const fs::path state = dir / "straight" / "checkpoints" / "step-00000004" /
                           shardrec::train::managed_collision_file("t4", 0);
    CHECK(fs::file_size(state) > 0);

    const RunResult first = run_shardrec(mc_args(dir / "first", 4));
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    auto args = mc_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", (dir / "first" / "checkpoints").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto want = numbers(dir / "straight", 5);
    REQUIRE(want.size() == 7);  // train 5..8, managed_collision 6 and 8, eval 8
    CHECK(numbers(dir / "resumed", 0) == want);
    CHECK(crcs(dir / "resumed" / "checkpoints" / "step-00000008") ==
          crcs(dir / "straight" / "checkpoints" / "step-00000008"));

    // ckpt export writes the raw id -> row map beside the tables: (id, row) per occupied slot,
    // rows 0.. in slot order, distinct ids; as many as the last record's occupancy.
    int64_t occupancy = -1;
    for (const auto& r : read_metrics(dir / "straight")) {
        if (r.at("kind") == "managed_collision")
            occupancy = std::stoll(r.at("occupancy"));
    }
    const fs::path out = dir / "export";
    const RunResult ex =
        run_shardrec({"ckpt", "export", (dir / "straight" / "checkpoints").string(), "--format",
                      "safetensors", "--out", out.string()});
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
    const std::vector<int64_t> map = id_to_row(out, occupancy);
    std::set<int64_t> ids;
    for (int64_t s = 0; s < occupancy; ++s) {
        CHECK(map[2 * s + 1] == s);
        ids.insert(map[2 * s]);
    }
    CHECK(static_cast<int64_t>(ids.size()) == occupancy);
    CHECK(occupancy > 0);
}

// With the rows on disk behind a small cache (key_value) the evicted rows are reset in the cache
// or in the store: the same losses, records and evaluation as the rows in memory, bit for bit.
// SGD with a sparse learning rate of 2 moves the rows far enough that a row not reset shows.
TEST_CASE("managed collision e2e: a key_value table evicts and trains as the fused one",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_key_value");
    const auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
        auto args = mc_args(dir / name, 8);
        for (const std::string& set :
             {std::string("optimizer.sparse.type=sgd"),
              std::string("optimizer.sparse.learning_rate=2"),
              std::string("model.tables[4].managed_collision.total_num_buckets=2"),
              std::string("sharding.tables[2].sharding_type=table_wise")})
            args.insert(args.end(), {"--set", set});
        for (const std::string& set : extra)
            args.insert(args.end(), {"--set", set});
        const RunResult r = run_shardrec(args);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
    };
    run("fused", {});
    run("kv",
        {"sharding.compute_kernel=key_value", "sharding.storage.path=" + (dir / "storage").string(),
         "sharding.cache.load_factor=0.05"});
    int64_t evictions = 0;
    for (const auto& r : read_metrics(dir / "fused")) {
        if (r.at("kind") == "managed_collision")
            evictions += std::stoll(r.at("evictions"));
    }
    CHECK(evictions > 0);
    std::vector<std::string> kv = numbers(dir / "kv", 0);  // less the cache's own records
    kv.erase(std::remove_if(kv.begin(), kv.end(),
                            [](const std::string& line) { return line.rfind("cache ", 0) == 0; }),
             kv.end());
    CHECK(kv == numbers(dir / "fused", 0));
    // The rows themselves (the losses alone may not see a row that was not reset).
    const auto t4 = [&](const std::string& name) {
        const fs::path out = dir / (name + "_export");
        const RunResult ex = run_shardrec({"ckpt", "export", (dir / name / "checkpoints").string(),
                                           "--format", "npy", "--out", out.string()});
        INFO(ex.output);
        REQUIRE(ex.exit_code == 0);
        return read_file(out / "sparse_arch.embedding_bag_collection.embedding_bags.t4.weight.npy");
    };
    const std::string fused_rows = t4("fused");
    CHECK(fused_rows.size() > 1000 * 4 * 4);
    CHECK(t4("kv") == fused_rows);
}

TEST_CASE("managed collision e2e: a checkpoint without its remap state is refused, naming the file",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_state");
    const RunResult mc = run_shardrec(mc_args(dir / "mc", 4));
    INFO(mc.output);
    REQUIRE(mc.exit_code == 0);
    const fs::path ckpt = dir / "mc" / "checkpoints" / "step-00000004";
    const RunResult info = run_shardrec({"ckpt", "info", ckpt.string()});
    CHECK_THAT(info.output, Contains("managed-collision remap in 1 bucket(s)"));
    // Another bucket count is another model: refused, naming the key and the file it lacks.
    auto other = mc_args(dir / "buckets", 8);
    other.insert(other.end(), {"--resume", ckpt.string(), "--set",
                               "model.tables[4].managed_collision.total_num_buckets=2"});
    const RunResult buckets = run_shardrec(other);
    CHECK(buckets.exit_code != 0);
    CHECK_THAT(buckets.output,
               Contains("managed_collision/t4.1.bin") && Contains("total_num_buckets"));
    // A config whose t4 is not managed would look rows up by raw id and save without the remap:
    // refused by train --resume and eval alike, naming the table and the key.
    std::vector<std::string> plain;
    for (const std::string& a : mc_args(dir / "plain", 8)) {
        if (a.rfind("model.tables[4].managed_collision", 0) == 0 ||
            a.rfind("data.synthetic.raw_id_drift", 0) == 0) {
            plain.pop_back();  // its --set
            continue;
        }
        plain.push_back(a);
    }
    std::vector<std::string> eval_plain = {"eval",
                                           (repo_root() / "configs" / "quickstart.yaml").string(),
                                           "--checkpoint", ckpt.string()};
    plain.insert(plain.end(), {"--resume", ckpt.string()});
    for (const auto& command : {plain, eval_plain}) {
        const RunResult unmanaged = run_shardrec(command);
        INFO(command.front() << ": " << unmanaged.output);
        CHECK(unmanaged.exit_code != 0);
        CHECK_THAT(unmanaged.output, Contains("table 't4' has a managed-collision remap state") &&
                                         Contains("model.tables[].managed_collision"));
    }
    auto args = mc_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", ckpt.string()});
    // The manifest lists the file with its CRC: the file check names what is missing.
    fs::rename(ckpt / shardrec::train::managed_collision_file("t4", 0), ckpt / "mc_moved.bin");
    const RunResult resumed = run_shardrec(args);
    CHECK(resumed.exit_code != 0);
    CHECK_THAT(resumed.output, Contains("managed_collision/t4.0.bin"));
}

// Sharded: t4's ids in 4 hash buckets, each remapped on the rank holding its rows (row_wise at 2
// ranks: two buckets a rank; column_wise at 4: the first column shard's rank), so 1, 2 and 4 ranks
// with the same global batch (32) assign the same slots, evict the same ids and train the same
// model; so do 4 ranks in two replica groups (2D). The state written at 4 ranks resumes at 2. With
// one bucket, 2 ranks give what 1 does.
TEST_CASE(
    "managed collision e2e: 1, 2 and 4 ranks give the same slots and losses, and resume "
    "across world sizes",
    "[e2e][mc]") {
    const auto dir = fresh_dir("mc_world");
    const auto run = [&](int np, const std::string& name, const std::string& plan,
                         const std::string& resume, const std::string& extra = "",
                         int buckets = 4) {
        auto args = mc_args(dir / name, 8);
        if (!extra.empty())
            args.insert(args.end(), {"--set", extra});
        // SGD: Adagrad's g / sqrt(G) on the first steps' tiny G turns the last-bit differences of
        // the rank-order sums into ~1e-3 relative ones on this model, MC or not. A sparse learning
        // rate of 2 moves the rows far enough that a row not reset shows (~4e-4).
        args.insert(args.end(), {"--set", "data.batch_size=" + std::to_string(32 / np), "--set",
                                 "optimizer.dense.type=sgd", "--set", "optimizer.sparse.type=sgd",
                                 "--set", "optimizer.sparse.learning_rate=2", "--set",
                                 "model.tables[4].managed_collision.total_num_buckets=" +
                                     std::to_string(buckets)});
        if (!plan.empty())
            args.insert(args.end(), {"--set", "sharding.tables[2].sharding_type=" + plan});
        if (!resume.empty())
            args.insert(args.end(), {"--resume", resume});
        const std::string prefix = np == 1 ? std::string()
                                           : "timeout -k 10 300 mpirun -np " + std::to_string(np) +
                                                 " --allow-run-as-root --oversubscribe";
        const RunResult r = run_shardrec(args, prefix);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return r.output;
    };
    run(1, "np1", "", "");
    const std::string np2 = run(2, "np2", "row_wise", "");
    const std::string apart = "its rows are on 2 ranks, its managed-collision state on rank 0";
    CHECK_THAT(np2, !Contains(apart));
    run(4, "np4", "column_wise", "");
    // 2D: two groups of 2 ranks, each holding all of t4 row_wise; the buckets live in the first.
    run(4, "np4_2d", "row_wise", "", "sharding.replica_groups=2");
    const fs::path resume_from = dir / "np4" / "checkpoints" / "step-00000004";
    run(2, "np4_to_np2", "row_wise", resume_from.string());
    // One bucket: every rank sends its ids of t4 to the one rank that keeps it.
    run(1, "np1_k1", "", "", "", 1);
    const std::string np2_k1 = run(2, "np2_k1", "row_wise", "", "", 1);
    CHECK_THAT(np2_k1, Contains(apart) && Contains("total_num_buckets a multiple of 2"));

    // The metrics: loss, AUC and NE within 1e-5 (the dense gradients are averaged over ranks in
    // another order; without managed collision this model agrees to ~1e-7), the remap's counts
    // exactly.
    const auto split = [](const std::vector<std::string>& lines) {
        std::vector<std::string> counts;
        std::vector<double> values;
        for (const std::string& line : lines) {
            std::istringstream in(line);
            std::string word, kept;
            while (in >> word) {
                const auto eq = word.find('=');
                const std::string key = eq == std::string::npos ? "" : word.substr(0, eq);
                if (key == "loss" || key == "auc" || key == "ne")
                    values.push_back(std::stod(word.substr(eq + 1)));
                else
                    kept += word + " ";
            }
            counts.push_back(kept);
        }
        return std::make_pair(counts, values);
    };
    const auto reference = split(numbers(dir / "np1", 0));
    REQUIRE(reference.first.size() == 14);  // train 1..8, managed_collision 2, 4, 6, 8, eval 4, 8
    const auto check_same = [&](const std::string& name, int from,
                                const std::string& reference_run = "np1") {
        INFO(name);
        auto want = split(numbers(dir / reference_run, from));
        const auto got = split(numbers(dir / name, 0));
        CHECK(got.first == want.first);
        REQUIRE(got.second.size() == want.second.size());
        for (size_t i = 0; i < got.second.size(); ++i) {
            INFO("value " << i << ": " << got.second[i] << " vs " << want.second[i]);
            CHECK(std::abs(got.second[i] - want.second[i]) <= 1e-5 * std::abs(want.second[i]));
        }
    };
    int64_t evictions_after_4 = 0;  // the resumed run evicts too
    for (const auto& r : read_metrics(dir / "np1")) {
        if (r.at("kind") == "managed_collision" && std::stoi(r.at("step")) > 4)
            evictions_after_4 += std::stoll(r.at("evictions"));
    }
    CHECK(evictions_after_4 > 0);
    check_same("np2", 0);
    check_same("np4", 0);
    check_same("np4_2d", 0);
    check_same("np4_to_np2", 5);
    check_same("np2_k1", 0, "np1_k1");

    // The remap state of the 4 buckets, bitwise, at the checkpoint of step 4 and after step 8.
    const auto state = [&](const std::string& name, const char* step, int buckets = 4) {
        std::string all;
        for (int b = 0; b < buckets; ++b) {
            std::ifstream in(dir / name / "checkpoints" / step /
                                 shardrec::train::managed_collision_file("t4", b),
                             std::ios::binary);
            const std::string one(std::istreambuf_iterator<char>(in), {});
            CHECK(one.size() > 6 * 8);
            all += one;
        }
        return all;
    };
    // The rows of t4 (evicted rows reset on the rank that holds them) within 1e-5 (~2e-9 seen);
    // a row trained but not reset is off by its updates.
    const auto rows_close = [&](const std::string& name, const char* step,
                                const std::string& reference_run = "np1") {
        const auto want = table_rows(dir / reference_run / "checkpoints" / step, "t4");
        const auto got = table_rows(dir / name / "checkpoints" / step, "t4");
        REQUIRE(got.size() == want.size());
        size_t off = 0;
        for (size_t i = 0; i < got.size(); ++i)
            off += std::abs(got[i] - want[i]) > 1e-5f ? 1 : 0;
        INFO(name << " " << step);
        CHECK(off == 0);
    };
    for (const char* step : {"step-00000004", "step-00000008"}) {
        INFO(step);
        const std::string one = state("np1", step);
        REQUIRE(!one.empty());
        CHECK(state("np2", step) == one);
        CHECK(state("np4", step) == one);
        CHECK(state("np4_2d", step) == one);
        rows_close("np2", step);
        rows_close("np4", step);
        rows_close("np4_2d", step);
        REQUIRE(!state("np1_k1", step, 1).empty());
        CHECK(state("np2_k1", step, 1) == state("np1_k1", step, 1));
        rows_close("np2_k1", step, "np1_k1");
    }
    rows_close("np4_to_np2", "step-00000008");
    CHECK(state("np4_to_np2", "step-00000008") == state("np1", "step-00000008"));

    // ckpt export of the 4-rank run: every bucket's pairs, each id in a slot of its bucket (rows
    // [250 b, 250 b + 25)), as many as the last record's occupancy.
    int64_t occupancy = -1;
    for (const auto& r : read_metrics(dir / "np1")) {
        if (r.at("kind") == "managed_collision")
            occupancy = std::stoll(r.at("occupancy"));
    }
    const RunResult ex = run_shardrec({"ckpt", "export", (dir / "np4" / "checkpoints").string(),
                                       "--format", "npy", "--out", (dir / "export").string()});
    INFO(ex.output);
    REQUIRE(ex.exit_code == 0);
    const std::vector<int64_t> map = id_to_row(dir / "export", occupancy);
    std::set<int64_t> ids;
    std::vector<int64_t> per_bucket(4, 0);
    for (int64_t s = 0; s < occupancy; ++s) {
        const int64_t b = shardrec::managed_collision_bucket(map[2 * s], uint64_t{1} << 63, 4);
        INFO("id " << map[2 * s] << " row " << map[2 * s + 1] << " bucket " << b);
        CHECK(map[2 * s + 1] >= 250 * b);
        CHECK(map[2 * s + 1] < 250 * b + 25);
        ids.insert(map[2 * s]);
        ++per_bucket[static_cast<size_t>(b)];
    }
    CHECK(static_cast<int64_t>(ids.size()) == occupancy);
    CHECK(std::count(per_bucket.begin(), per_bucket.end(), 0) == 0);
}

// A quantized model keeps the remap state: predict maps raw ids as the trained model does (f32
// rows: the scores of eval --predictions on the checkpoint, digit for digit), so does eval
// --model (the same AUC), and a config without the table's managed_collision is refused.
TEST_CASE("managed collision e2e: a quantized model maps raw ids through the trained remap",
          "[e2e][mc]") {
    const auto dir = fresh_dir("mc_quantized");
    // Two buckets: the model carries both states.
    auto args = mc_args(dir / "run", 8);
    args.insert(args.end(), {"--set", "model.tables[4].managed_collision.total_num_buckets=2"});
    const RunResult t = run_shardrec(args);
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const std::string ckpt = (dir / "run" / "checkpoints").string();
    const std::string config = (dir / "run" / "config.yaml").string();
    const std::string model = (dir / "model").string();
    const RunResult q =
        run_shardrec({"ckpt", "quantize", ckpt, "--out", model, "--weights", "f32"});
    INFO(q.output);
    REQUIRE(q.exit_code == 0);
    for (int b = 0; b < 2; ++b) {
        const std::string file = shardrec::train::managed_collision_file("t4", b);
        const std::string state = read_file(fs::path(model) / file);
        CHECK(state.size() > 6 * 8);
        CHECK(state == read_file(dir / "run" / "checkpoints" / "step-00000008" / file));
    }

    const fs::path want = dir / "eval.csv", got = dir / "predict.csv";
    const RunResult e =
        run_shardrec({"eval", config, "--checkpoint", ckpt, "--predictions", want.string()});
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    const RunResult p =
        run_shardrec({"predict", model, "--data", "synthetic", "--out", got.string()});
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    std::vector<std::string> expected = csv_column(want, 1);
    const std::vector<std::string> scores = csv_column(got, 0);
    REQUIRE(scores.size() == 256);
    REQUIRE(expected.size() >= scores.size());
    expected.resize(scores.size());
    CHECK(scores == expected);

    // eval --model: the checkpoint's AUC.
    const auto auc = [](const std::string& output) {
        const auto at = output.find("\"auc\":");
        return at == std::string::npos ? std::string() : output.substr(at, 16);
    };
    const RunResult em = run_shardrec({"eval", config, "--model", model});
    INFO(em.output);
    REQUIRE(em.exit_code == 0);
    CHECK(!auc(e.output).empty());
    CHECK(auc(em.output) == auc(e.output));

    // A request's raw ids of the managed table are not held to its 1000 rows (the remap maps
    // them), the other tables' ids are.
    const fs::path examples = dir / "examples.json";
    const std::string dense = "\"dense\":[1,2,3,4,5,6,7,8,9,10,11,12,13]";
    std::ofstream(examples) << "{\"examples\":[{" + dense +
                                   ",\"sparse\":{\"f_t4\":[5000000,7]}}]}\n";
    const RunResult raw = run_shardrec(
        {"predict", model, "--data", examples.string(), "--out", (dir / "raw.csv").string()});
    INFO(raw.output);
    CHECK(raw.exit_code == 0);
    CHECK(csv_column(dir / "raw.csv", 0).size() == 1);
    std::ofstream(examples) << "{\"examples\":[{" + dense + ",\"sparse\":{\"f_t1\":[10000]}}]}\n";
    const RunResult bad = run_shardrec(
        {"predict", model, "--data", examples.string(), "--out", (dir / "bad.csv").string()});
    CHECK(bad.exit_code != 0);
    CHECK_THAT(bad.output, Contains("outside the table's rows [0, 10000)"));

    // The quickstart's config has no managed_collision on t4: refused, naming table and model.
    const RunResult wrong =
        run_shardrec({"predict", model, "--data", "synthetic", "--out", got.string(), "--config",
                      (repo_root() / "configs" / "quickstart.yaml").string()});
    CHECK(wrong.exit_code != 0);
    CHECK_THAT(wrong.output, Contains("table 't4' has a managed-collision remap state"));
}
