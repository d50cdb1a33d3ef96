// Checkpoints in one process: save then load gives the bitwise state, training 2N steps straight
// equals N, save, load into a fresh trainer, N more; bad checksums, other models, missing files
// and incomplete saves are refused with the file or mismatch named.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "test/support/compare.h"

using shardrec::test::error_of;

using namespace shardrec;
namespace fs = std::filesystem;

namespace {

const char* const kConfig = R"(
train: {steps: 8, seed: 5, log_every: 4, eval_samples: 256}
data: {type: synthetic, batch_size: 16}
model:
  type: dlrm
  embedding_dim: 4
  bottom_mlp: [8, 4]
  top_mlp: [8, 1]
  tables:
    - {name: a, num_embeddings: 37, pooling_factor: 2}
    - {name: b, num_embeddings: 11, feature_names: [b1, b2]}
optimizer:
  dense: {type: adam, learning_rate: 0.01}
  sparse: {type: adam, learning_rate: 0.02}
)";

fs::path fresh(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("shardrec_test_ckpt_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// Every byte of the training state: table shards and their optimizer state and step, dense
// parameters, dense optimizer state.
std::vector<std::vector<uint8_t>> snapshot(train::Trainer& t) {
    std::vector<std::vector<uint8_t>> out;
    auto bytes = [&](const Tensor& x) {
        const auto* p = static_cast<const uint8_t*>(x.data_ptr());
        out.emplace_back(p, p + x.nbytes());
    };
    for (const auto& s : t.model().sparse_arch().shard_states()) {
        bytes(s.weight);
        for (const auto& st : s.optimizer_state)
            bytes(st);
        out.push_back({static_cast<uint8_t>(*s.optimizer_step)});
    }
    for (Parameter* p : t.model().parameters())
        bytes(p->value);
    for (const auto& [name, x] : t.dense_optimizer().state())
        bytes(*x);
    return out;
}

std::vector<float> train_steps(train::Trainer& t, int64_t first, int64_t end) {
    std::vector<float> losses;
    for (int64_t s = first; s < end; ++s)
        losses.push_back(t.train_step(t.train_batch(s), s).loss);
    return losses;
}

std::string with(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("checkpoint: N steps, save, load into a fresh trainer, N more equals 2N straight",
          "[train][checkpoint]") {
    for (const char* sparse : {"adam", "rowwise_adagrad", "adagrad", "sgd"}) {
        INFO("optimizer.sparse.type " << sparse);
        const Config config =
            parse_config(kConfig, {std::string("optimizer.sparse.type=") + sparse});
        const fs::path dir = fresh(std::string("resume_") + sparse);
        train::Trainer straight(config, nullptr);
        const auto straight_losses = train_steps(straight, 0, 8);

        train::Trainer first(config, nullptr);
        auto losses = train_steps(first, 0, 4);
        const std::string saved = train::save_checkpoint(first, dir.string(), 4, 2);
        CHECK(fs::path(saved).filename() == "step-00000004");

        train::Trainer resumed(config, nullptr);
        CHECK(train::load_checkpoint(resumed, dir.string(), {true}) == 4);
        REQUIRE(snapshot(resumed) == snapshot(first));
        const auto more = train_steps(resumed, 4, 8);
        losses.insert(losses.end(), more.begin(), more.end());
        CHECK(losses == straight_losses);  // bitwise
        CHECK(snapshot(resumed) == snapshot(straight));
    }
}

TEST_CASE("checkpoint: keeps the newest K, and a parent directory resolves to the newest",
          "[train][checkpoint]") {
    const Config config = parse_config(kConfig, {});
    const fs::path dir = fresh("keep");
    train::Trainer t(config, nullptr);
    for (int64_t step = 1; step <= 4; ++step) {
        (void)train_steps(t, step - 1, step);
        train::save_checkpoint(t, dir.string(), step, 2);
    }
    CHECK(!fs::exists(dir / "step-00000002"));
    CHECK(fs::exists(dir / "step-00000003"));
    // An incomplete save (no manifest, a .tmp- name) is never picked.
    fs::create_directories(dir / ".tmp-step-00000009" / "tables");
    fs::create_directories(dir / "step-00000010");  // no manifest: incomplete
    CHECK(train::resolve_checkpoint(dir.string()) == (dir / "step-00000004").string());
    const auto m = train::read_manifest((dir / "step-00000004").string());
    CHECK(m.step == 4);
    CHECK(m.tables.size() == 2);
    CHECK(m.tables[0].shards.size() == 1);
    CHECK(m.sparse_state == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
    // The next complete save removes leftovers of failed ones.
    (void)train_steps(t, 4, 5);
    train::save_checkpoint(t, dir.string(), 5, 2);
    CHECK(!fs::exists(dir / ".tmp-step-00000009"));
}

TEST_CASE("checkpoint: a corrupt, foreign or incomplete checkpoint is refused by name",
          "[train][checkpoint]") {
    const Config config = parse_config(kConfig, {});
    const fs::path dir = fresh("bad");
    train::Trainer t(config, nullptr);
    (void)train_steps(t, 0, 2);
    const fs::path ckpt = train::save_checkpoint(t, dir.string(), 2, 0);

    SECTION("a flipped byte names the file and both checksums") {
        const fs::path file = ckpt / "tables" / "a.0.0.exp_avg.bin";
        REQUIRE(fs::exists(file));
        {
            std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(5);
            f.put('\x7f');
        }
        train::Trainer u(config, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string()); });
        CHECK_THAT(e, Catch::Contains("tables/a.0.0.exp_avg.bin") && Catch::Contains("CRC-32") &&
                          Catch::Contains("expected"));
    }
    SECTION("another model names the table and both shapes") {
        const Config other =
            parse_config(with(kConfig, "num_embeddings: 37", "num_embeddings: 38"), {});
        train::Trainer u(other, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string()); });
        CHECK_THAT(e, Catch::Contains("another model") && Catch::Contains("table 'a'") &&
                          Catch::Contains("[37, 4]") && Catch::Contains("[38, 4]"));
    }
    SECTION("another dense layer names the parameter") {
        const Config other =
            parse_config(with(kConfig, "bottom_mlp: [8, 4]", "bottom_mlp: [6, 4]"), {});
        train::Trainer u(other, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string()); });
        CHECK_THAT(e, Catch::Contains("dense_arch.model._mlp.0._linear.weight"));
    }
    SECTION("another optimizer is named") {
        const Config other = parse_config(kConfig, {"optimizer.sparse.type=adagrad"});
        train::Trainer u(other, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string()); });
        CHECK_THAT(e, Catch::Contains("optimizer.sparse.type adam"));
    }
    SECTION("a missing file is named") {
        fs::remove(ckpt / "dense" / "over_arch.final._linear.bias.bin");
        train::Trainer u(config, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string()); });
        CHECK_THAT(e, Catch::Contains("missing file dense/over_arch.final._linear.bias.bin"));
    }
    SECTION("resuming with another seed is refused") {
        const Config other = parse_config(kConfig, {"train.seed=6"});
        train::Trainer u(other, nullptr);
        const std::string e = error_of([&] { train::load_checkpoint(u, ckpt.string(), {true}); });
        CHECK_THAT(e, Catch::Contains("train.seed 5"));
    }
    SECTION("a directory without any complete checkpoint") {
        const std::string e = error_of([&] { train::resolve_checkpoint(fresh("empty").string()); });
        CHECK_THAT(e, Catch::Contains("no manifest.yaml"));
    }
}

namespace {

std::vector<uint8_t> bytes_of(const Tensor& x) {
    const auto* p = static_cast<const uint8_t*>(x.data_ptr());
    return {p, p + x.nbytes()};
}

bool same_batch(const Batch& a, const Batch& b) {
    return bytes_of(a.dense) == bytes_of(b.dense) && bytes_of(a.labels) == bytes_of(b.labels);
}

void rewrite(const fs::path& file, const std::string& from, const std::string& to) {
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    std::ofstream(file, std::ios::trunc) << with(text, from, to);
}

}  // namespace

TEST_CASE(
    "checkpoint: pruning keeps to the run's own checkpoints; another run's step is not "
    "replaced",
    "[train][checkpoint]") {
    const Config config = parse_config(kConfig, {});
    const fs::path dir = fresh("two_runs");
    train::Trainer old_run(config, nullptr);
    old_run.set_run_id("old");
    (void)train_steps(old_run, 0, 3);
    train::save_checkpoint(old_run, dir.string(), 3, 0);
    train::Trainer new_run(config, nullptr);
    new_run.set_run_id("new");
    for (int64_t step = 1; step <= 2; ++step) {
        (void)train_steps(new_run, step - 1, step);
        train::save_checkpoint(new_run, dir.string(), step, 1);
    }
    // The new run's step 2 is its newest and stays; the old run's step 3, newer by step, stays too.
    CHECK(!fs::exists(dir / "step-00000001"));
    CHECK(train::read_manifest((dir / "step-00000002").string()).run_id == "new");
    CHECK(train::read_manifest((dir / "step-00000003").string()).run_id == "old");
    CHECK(train::checkpoint_run_id(dir.string()) == "old");
    (void)train_steps(new_run, 2, 3);
    const std::string e = error_of([&] { train::save_checkpoint(new_run, dir.string(), 3, 1); });
    CHECK_THAT(e, Catch::Contains("step-00000003 is a checkpoint of another run (old)"));
    CHECK(train::read_manifest((dir / "step-00000003").string()).run_id == "old");
}

TEST_CASE("checkpoint: an edited manifest is refused; a damaged newest checkpoint is skipped",
          "[train][checkpoint]") {
    const Config config = parse_config(kConfig, {});
    const fs::path dir = fresh("fallback");
    train::Trainer t(config, nullptr);
    for (int64_t step = 1; step <= 2; ++step) {
        (void)train_steps(t, step - 1, step);
        train::save_checkpoint(t, dir.string(), step, 0);
    }
    const auto state_at_2 = snapshot(t);
    (void)train_steps(t, 2, 3);
    train::save_checkpoint(t, dir.string(), 3, 0);
    const fs::path newest = dir / "step-00000003";
    test::ExpectLogs expect;  // the skipped checkpoints are warnings

    SECTION("an edited step names the manifest") {
        rewrite(newest / "manifest.yaml", "step: 3", "step: 30");
        const std::string e = error_of([&] { train::read_manifest(newest.string()); });
        CHECK_THAT(e, Catch::Contains("manifest was edited or is damaged") &&
                          Catch::Contains("manifest_crc32"));
        // A directory of checkpoints falls back to the newest intact one.
        train::Trainer u(config, nullptr);
        CHECK(train::load_checkpoint(u, dir.string(), {true}) == 2);
        CHECK(snapshot(u) == state_at_2);
        // Named directly, it is an error.
        train::Trainer w(config, nullptr);
        CHECK_THAT(error_of([&] { train::load_checkpoint(w, newest.string()); }),
                   Catch::Contains("edited or is damaged"));
    }
    SECTION("a file outside the checkpoint, a bad checksum text, a shard of no rank") {
        train::CheckpointManifest m = train::read_manifest(newest.string());
        auto error_with = [&](const std::function<void(train::CheckpointManifest&)>& edit) {
            train::CheckpointManifest bad = m;
            edit(bad);
            return error_of([&] { train::parse_manifest(train::manifest_to_yaml(bad), "m.yaml"); });
        };
        CHECK_THAT(error_with([](auto& b) { b.files[0].path = "../../etc/passwd"; }),
                   Catch::Contains("'../../etc/passwd' is not a file inside the checkpoint"));
        CHECK_THAT(error_with([](auto& b) { b.dense[0].file = "/etc/passwd"; }),
                   Catch::Contains("'/etc/passwd' is not a file inside the checkpoint"));
        CHECK_THAT(error_with([](auto& b) { b.tables[0].shards[0].rank = 3; }),
                   Catch::Contains("a shard of rank 3 in a checkpoint of 1 rank(s)"));
        CHECK_THAT(error_with([](auto& b) { b.files[0].bytes = -1; }),
                   Catch::Contains("bytes: -1 is negative"));
        const std::string text = train::manifest_to_yaml(m);
        std::string edited = with(text, "crc32: 0x", "crc32: 0xzz");
        edited = with(edited.substr(0, edited.rfind("manifest_crc32:")), "version: 2",
                      "version: 1");  // version 1: no checksum line to stop it first
        CHECK_THAT(error_of([&] { train::parse_manifest(edited, "m.yaml"); }),
                   Catch::Contains("is not 0x and 8 hex digits"));
        CHECK(train::parse_manifest(text, "m.yaml").files.size() == m.files.size());
    }
    SECTION("a removed checksum line is refused") {
        rewrite(newest / "manifest.yaml", "manifest_crc32:", "# manifest_crc32:");
        CHECK_THAT(error_of([&] { train::read_manifest(newest.string()); }),
                   Catch::Contains("manifest_crc32"));
    }
    SECTION("a damaged table file falls back too") {
        {
            std::fstream f(newest / "tables" / "a.0.0.weight.bin",
                           std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(3);
            f.put('\x11');
        }
        train::Trainer u(config, nullptr);
        CHECK(train::load_checkpoint(u, dir.string(), {true}) == 2);
        CHECK(snapshot(u) == state_at_2);
    }
    SECTION("every checkpoint damaged: the oldest's error") {
        for (const char* step : {"step-00000001", "step-00000002", "step-00000003"})
            rewrite(dir / step / "manifest.yaml", "seed: 5", "seed: 6");
        train::Trainer u(config, nullptr);
        CHECK_THAT(error_of([&] { train::load_checkpoint(u, dir.string(), {true}); }),
                   Catch::Contains("step-00000001") && Catch::Contains("edited or is damaged"));
    }
}

TEST_CASE("checkpoint: a resume with another global batch continues at the next unseen sample",
          "[train][checkpoint]") {
    const Config small = parse_config(kConfig, {});                      // global batch 16
    const Config large = parse_config(kConfig, {"data.batch_size=32"});  // global batch 32
    const fs::path dir = fresh("other_batch");
    test::ExpectLogs expect;  // the resume warns of the other global batch
    train::Trainer first(large, nullptr);
    (void)train_steps(first, 0, 2);  // samples [0, 64)
    train::save_checkpoint(first, dir.string(), 2, 0);
    CHECK(train::read_manifest((dir / "step-00000002").string()).samples == 64);

    train::Trainer reference(small, nullptr);  // batch s reads samples [16 s, 16 s + 16)
    train::Trainer resumed(small, nullptr);
    CHECK(train::load_checkpoint(resumed, dir.string(), {true}) == 2);
    CHECK(resumed.samples_at(2) == 64);
    CHECK(resumed.samples_at(3) == 80);
    CHECK(same_batch(resumed.train_batch(2), reference.train_batch(4)));
    CHECK(same_batch(resumed.train_batch(3), reference.train_batch(5)));
    CHECK(!same_batch(resumed.train_batch(2), reference.train_batch(2)));
    // The checkpoint it writes records the position it reached.
    (void)train_steps(resumed, 2, 3);
    train::save_checkpoint(resumed, dir.string(), 3, 0);
    CHECK(train::read_manifest((dir / "step-00000003").string()).samples == 80);
}

TEST_CASE("checkpoint: for_each_table_block hands a table's rows in order, as read whole",
          "[train][checkpoint]") {
    // In f32, f16 and bf16, through blocks of 1, 3 and all rows. (Sparse key_value shards, whose
    // rows not saved are at their initial value: test_e2e "[key_value]" quantizes one.)
    const fs::path dir = fresh("blocks");
    for (const char* dtype : {"f32", "f16", "bf16"}) {
        INFO("dtype " << dtype);
        train::Trainer t(parse_config(kConfig, {std::string("model.tables[0].data_type=") + dtype}),
                         nullptr);
        train_steps(t, 0, 2);
        const std::string saved = train::save_checkpoint(t, (dir / dtype).string(), 2, 0);
        const train::CheckpointManifest m = train::read_manifest(saved);
        const train::CheckpointTable& a = *m.table("a");
        Tensor whole = Tensor::empty({a.num_embeddings, a.embedding_dim}, a.dtype);
        train::read_table_region(saved, m, a, -1, 0, a.num_embeddings, 0, a.embedding_dim, whole);
        const int64_t row_bytes = a.embedding_dim * dtype_size(a.dtype);
        for (const int64_t block_bytes : {row_bytes, 3 * row_bytes, int64_t{1} << 20}) {
            std::vector<uint8_t> joined;
            int64_t next = 0;
            train::for_each_table_block(
                saved, m, a,
                [&](int64_t first, const Tensor& block) {
                    CHECK(first == next);
                    CHECK(block.shape()[0] <= std::max<int64_t>(1, block_bytes / row_bytes));
                    next += block.shape()[0];
                    const auto* p = static_cast<const uint8_t*>(block.data_ptr());
                    joined.insert(joined.end(), p, p + block.nbytes());
                },
                block_bytes);
            CHECK(next == a.num_embeddings);
            const auto* w = static_cast<const uint8_t*>(whole.data_ptr());
            CHECK(joined == std::vector<uint8_t>(w, w + whole.nbytes()));
        }
    }
}
