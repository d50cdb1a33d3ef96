// End to end on Criteo-format data that the test writes itself (no download): the real binary
// preprocesses TSV days (bad lines stop or are skipped, a rerun resumes to identical bytes, memory
// does not grow with the input), then trains on the shards with 1 and 2 ranks to the same losses
// (each rank reads its slice of the global batch), and refuses a corrupted shard by name.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <regex>

#include "test/e2e/e2e_support.h"
#include "test/support/criteo_tsv_gen.h"

using Catch::Matchers::Contains;

using namespace shardrec::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> write_days(const fs::path& dir, const std::vector<uint64_t>& lines) {
    std::vector<std::string> paths;
    uint64_t first = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
        paths.push_back((dir / ("day_" + std::to_string(i) + ".tsv")).string());
        (void)write_criteo_tsv(paths.back(), 5, first, lines[i]);
        first += lines[i];
    }
    return paths;
}

std::vector<std::string> preprocess_args(const std::vector<std::string>& inputs,
                                         const fs::path& out,
                                         std::vector<std::string> extra) {
    std::vector<std::string> args = {"data", "criteo-preprocess", "--in"};
    args.insert(args.end(), inputs.begin(), inputs.end());
    args.insert(args.end(), {"--out", out.string(), "--no-progress"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

std::string read_bytes(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        out[e.path().filename().string()] = read_bytes(e.path());
    }
    return out;
}

// A small DLRM over the 26 Criteo features, tables of 64 rows (the data's --max-ind-range).
std::string criteo_config(const fs::path& data) {
    std::string tables;
    for (int t = 0; t < 26; ++t) {
        tables += "    - {name: t_cat_" + std::to_string(t) +
                  ", num_embeddings: 64, feature_names: [cat_" + std::to_string(t) + "]}\n";
    }
    return "train: {steps: 12, seed: 3, log_every: 1, eval_every: 0, eval_samples: 64}\n"
           "data:\n  type: criteo_binary\n  batch_size: 16\n  criteo_binary: {path: " +
           data.string() +
           "}\n"
           "model:\n  type: dlrm\n  embedding_dim: 4\n  bottom_mlp: [8, 4]\n  top_mlp: [8, 1]\n"
           "  tables:\n" +
           tables +
           "optimizer:\n  dense: {type: sgd, learning_rate: 0.1}\n"
           "  sparse: {type: sgd, learning_rate: 0.1}\n";
}

std::vector<double> train_losses(const fs::path& run_dir) {
    std::vector<double> out;
    for (const auto& r : read_metrics(run_dir)) {
        if (r.at("kind") == "train") {
            out.push_back(std::stod(r.at("loss")));
        }
    }
    return out;
}

double peak_rss_mib(const std::string& output) {
    std::smatch m;
    REQUIRE(std::regex_search(output, m, std::regex("peak RSS ([0-9.]+) MiB")));
    return std::stod(m[1]);
}

}  // namespace

TEST_CASE("criteo e2e: preprocess, resume to identical bytes, train np 1 == np 2", "[e2e][mpi]") {
    const fs::path dir = fresh_dir("criteo");
    const auto days = write_days(dir, {700, 300, 200});
    const auto args = preprocess_args(days, dir / "data",
                                      {"--max-ind-range", "64", "--threads", "2",
                                       "--lines-per-shard", "256", "--chunk-lines", "50"});
    RunResult r = run_shardrec(args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("1200 rows") != std::string::npos);
    const auto full = snapshot(dir / "data");
    CHECK(full.count("manifest.json") == 1);
    CHECK(full.count("shard_0000_00002.bin") == 1);

    // An interrupted run: the last shard never renamed, its temporary left behind.
    fs::remove(dir / "data" / "shard_0002_00000.bin");
    fs::remove(dir / "data" / "manifest.json");
    std::ofstream(dir / "data" / "shard_0002_00000.bin.tmp") << "partial";
    r = run_shardrec(args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("1 shards written, 5 kept") != std::string::npos);
    CHECK(snapshot(dir / "data") == full);

    // Train: 1 rank with batch 16 and 2 ranks with batch 8 read the same global batches.
    const fs::path config = dir / "criteo.yaml";
    std::ofstream(config) << criteo_config(dir / "data");
    r = run_shardrec({"train", config.string(), "--out", (dir / "np1").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_shardrec(
        {"train", config.string(), "--out", (dir / "np2").string(), "--set", "data.batch_size=8"},
        "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& rec : read_metrics(dir / "np1")) {
        if (rec.at("kind") == "train") {
            CHECK(std::stod(rec.at("loader_wait_ms")) >= 0);  // reported for every train line
        }
    }
    const auto one = train_losses(dir / "np1");
    const auto two = train_losses(dir / "np2");
    REQUIRE(one.size() == 12);
    REQUIRE(two.size() == 12);
    CHECK(std::abs(one[0] - two[0]) <= 1e-6 * std::abs(one[0]));
    for (size_t i = 0; i < one.size(); ++i) {
        INFO("step " << i + 1 << ": " << one[i] << " vs " << two[i]);
        CHECK(std::isfinite(one[i]));
        CHECK(std::abs(one[i] - two[i]) <= 1e-4 * std::abs(one[i]));
    }
    // The losses follow the data: with a train split of 100 rows the 7th batch wraps around.
    r = run_shardrec({"train", config.string(), "--out", (dir / "wrap").string(), "--set",
                      "data.criteo_binary.eval_fraction=0.9166667"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto wrap = train_losses(dir / "wrap");
    REQUIRE(wrap.size() == 12);
    for (size_t i = 0; i < 6; ++i) {
        CHECK(wrap[i] == one[i]);
    }
    CHECK(wrap[6] != one[6]);

    // A corrupted shard stops training on every rank with its name.
    {
        std::fstream f(dir / "data" / "shard_0000_00000.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(200);
        const char byte = static_cast<char>(f.get() ^ 0x01);
        f.seekp(200);
        f.put(byte);
    }
    r = run_shardrec(
        {"train", config.string(), "--out", (dir / "bad").string(), "--set", "data.batch_size=8"},
        "mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("shard_0000_00000.bin") != std::string::npos);
    CHECK(r.output.find("checksum mismatch") != std::string::npos);
    fs::resize_file(dir / "data" / "shard_0000_00002.bin", 1000);
    r = run_shardrec({"train", config.string(), "--out", (dir / "short").string()});
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("shard_0000_00002.bin") != std::string::npos);
    CHECK(r.output.find("truncated") != std::string::npos);
}

TEST_CASE("criteo e2e: an eval split too small for train.eval_samples stops before training",
          "[e2e]") {
    const fs::path dir = fresh_dir("criteo_eval_split");
    const auto days = write_days(dir, {60, 20});
    RunResult r = run_shardrec(preprocess_args(days, dir / "data", {"--max-ind-range", "64"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const fs::path config = dir / "criteo.yaml";
    std::ofstream(config) << criteo_config(dir / "data");  // eval_samples: 64
    auto train = [&](const std::string& name, const std::string& set) {
        const RunResult t =
            run_shardrec({"train", config.string(), "--out", (dir / name).string(), "--set", set});
        CHECK(!fs::exists(dir / name / "metrics.jsonl"));  // no step ran
        return t;
    };
    // The last day (20 rows) is the eval split.
    r = train("small", "train.eval_every=0");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("train.eval_samples 64 is read in whole global batches of 16 (1 rank(s) "
                        "x data.batch_size 16), 64 rows, but the eval split of " +
                        (dir / "data").string() + " has only 20: set train.eval_samples <= 16") !=
          std::string::npos);
    // Less than one global batch: the advice is another batch size or split, never <= 0.
    r = train("one_batch", "data.batch_size=32");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("has only 20: not one global batch; lower data.batch_size") !=
          std::string::npos);
    // round(0.001 * 80) = 0 rows: only the opened data can tell.
    r = train("empty", "data.criteo_binary.eval_fraction=0.001");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("train.eval_samples is 64 but the eval split of " +
                        (dir / "data").string() + " is empty") != std::string::npos);
    // 16 rows fit, but the evaluation reads whole global batches: 2 x 12 = 24 rows > 20.
    r = run_shardrec({"train", config.string(), "--out", (dir / "rounded").string(), "--set",
                      "train.eval_samples=16", "--set", "data.batch_size=12"});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("train.eval_samples 16 is read in whole global batches of 12 (1 rank(s) x "
                        "data.batch_size 12), 24 rows, but the eval split of " +
                        (dir / "data").string() + " has only 20: set train.eval_samples <= 12") !=
          std::string::npos);
    CHECK(!fs::exists(dir / "rounded" / "metrics.jsonl"));
    r = train("none", "data.criteo_binary.eval_days=0");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("data.criteo_binary.eval_days: 0 with eval_fraction 0 leaves no eval "
                        "split, but train.eval_samples is 64") != std::string::npos);
}

TEST_CASE("criteo e2e: a malformed line stops with FILE:LINE and the field; or is skipped",
          "[e2e]") {
    const fs::path dir = fresh_dir("criteo_bad");
    const auto days = write_days(dir, {40, 40});
    {
        std::ofstream f(days[1], std::ios::app);
        std::string bad = criteo_sample(5, 999).line;
        const size_t field =
            bad.find('\t', bad.find('\t', bad.find('\t', bad.find('\t') + 1) + 1) + 1);
        bad.insert(field + 1, "x");  // int_3 (the 5th field) gets a letter
        f << bad << "\n";
    }
    RunResult r = run_shardrec(preprocess_args(days, dir / "data", {"--lines-per-shard", "16"}));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(days[1] + ":41: field int_3 (column 5): not an integer") !=
          std::string::npos);
    CHECK(!fs::exists(dir / "data" / "manifest.json"));
    for (const auto& e : fs::directory_iterator(dir / "data")) {
        CHECK(e.path().extension() != ".tmp");
    }
    r = run_shardrec(
        preprocess_args(days, dir / "data", {"--lines-per-shard", "16", "--skip-bad-lines"}));
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("80 rows") != std::string::npos);
    CHECK(r.output.find("(1 bad lines skipped)") != std::string::npos);
    r = run_shardrec({"data", "criteo-preprocess", "--in", days[0]});
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("needs --out DIR") != std::string::npos);
    r = run_shardrec({"data", "criteo-preprocess", "--in", (dir / "nope.tsv").string(), "--out",
                      (dir / "x").string()});
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("the input file (--in) '" + (dir / "nope.tsv").string() +
                        "' does not exist") != std::string::npos);
    CHECK(!fs::exists(dir / "x"));  // a failed start leaves no empty --out behind
    r = run_shardrec({"data", "criteo-preprocess", "--in", days[0], dir.string(), "--out",
                      (dir / "x").string()});
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("the input file (--in) '" + dir.string() +
                        "' is a directory, expected a file") != std::string::npos);
}

TEST_CASE("criteo e2e: preprocessing memory does not grow with the input", "[e2e][own_memory]") {
    const fs::path dir = fresh_dir("criteo_mem");
    const auto small = write_days(dir / "", {2000});
    fs::create_directories(dir / "big");
    const auto big = write_days(dir / "big", {120000});  // about 25 MB
    const std::vector<std::string> opts = {"--threads",       "2",   "--chunk-lines", "256",
                                           "--max-ind-range", "1000"};
    const RunResult a = run_shardrec(preprocess_args(small, dir / "small_out", opts));
    const RunResult b = run_shardrec(preprocess_args(big, dir / "big_out", opts));
    INFO(a.output << b.output);
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    const double input_mib = static_cast<double>(fs::file_size(big[0])) / 1048576.0;
    CHECK(input_mib > 20);
    // The chunks in flight are a few MiB at most; the rest is the process itself.
    CHECK(peak_rss_mib(b.output) - peak_rss_mib(a.output) < 8.0);
}

namespace {

// Rewrites every non-empty cat_0 value v of a TSV as the 64-bit (v << 32) | v (16 hex digits,
// most of them above 2^63), so that only a raw-id feature can keep them apart.
void widen_cat0(const std::string& path) {
    std::ifstream in(path);
    std::string text, line;
    while (std::getline(in, line)) {
        size_t start = 0;
        for (int column = 0; column < 14; ++column) {
            start = line.find('\t', start) + 1;
        }
        const size_t end = line.find('\t', start);
        if (end > start) {
            const uint64_t v = std::stoull(line.substr(start, end - start), nullptr, 16);
            line.replace(start, end - start, fmt::format("{:016x}", (v << 32) | v));
        }
        text += line + "\n";
    }
    in.close();
    std::ofstream(path, std::ios::binary) << text;
}

// cat_0 and cat_1 (raw ids) on managed-collision tables with fewer slots than their distinct
// ids, so that slots are evicted; cat_2 (ids mod 64) on a plain table.
std::string raw_id_config(const fs::path& data, bool manage_cat_1) {
    return "train: {steps: 12, seed: 3, log_every: 1, eval_every: 0, eval_samples: 64, "
           "checkpoint_every: 6}\n"
           "data:\n  type: criteo_binary\n  batch_size: 16\n  criteo_binary: {path: " +
           data.string() +
           "}\n"
           "model:\n  type: dlrm\n  embedding_dim: 4\n  bottom_mlp: [8, 4]\n  top_mlp: [8, 1]\n"
           "  tables:\n"
           "    - {name: t_cat_0, num_embeddings: 32, feature_names: [cat_0],\n"
           "       managed_collision: {zch_size: 24, mch_size: 8, eviction_interval: 2}}\n" +
           (manage_cat_1 ? "    - {name: t_cat_1, num_embeddings: 32, feature_names: [cat_1],\n"
                           "       managed_collision: {zch_size: 32, eviction_interval: 2}}\n"
                         : "    - {name: t_cat_1, num_embeddings: 32, feature_names: [cat_1]}\n") +
           "    - {name: t_cat_2, num_embeddings: 64, feature_names: [cat_2]}\n"
           "optimizer:\n  dense: {type: sgd, learning_rate: 0.1}\n"
           "  sparse: {type: sgd, learning_rate: 0.1}\n";
}

}  // namespace

TEST_CASE("criteo e2e: --raw-ids trains managed-collision tables; checkpoint, eval, predict",
          "[e2e][mc]") {
    const fs::path dir = fresh_dir("criteo_raw");
    const auto days = write_days(dir, {400, 100});
    for (const auto& day : days) {
        widen_cat0(day);
    }
    RunResult r = run_shardrec(preprocess_args(
        days, dir / "data",
        {"--max-ind-range", "64", "--raw-ids", "cat_0,cat_1", "--lines-per-shard", "128"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string manifest = read_bytes(dir / "data" / "manifest.json");
    CHECK(manifest.find("\"version\": 2") != std::string::npos);
    CHECK(manifest.find("{\"name\": \"cat_0\", \"num_embeddings\": 0, \"multi_hot\": 1, "
                        "\"raw_ids\": true}") != std::string::npos);
    CHECK(manifest.find("{\"name\": \"cat_2\", \"num_embeddings\": 64, \"multi_hot\": 1, "
                        "\"raw_ids\": false}") != std::string::npos);

    const fs::path config = dir / "raw.yaml";
    std::ofstream(config) << raw_id_config(dir / "data", true);
    r = run_shardrec({"train", config.string(), "--out", (dir / "run").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto losses = train_losses(dir / "run");
    REQUIRE(losses.size() == 12);
    for (const double loss : losses) {
        CHECK(std::isfinite(loss));
    }
    int64_t evictions = 0;
    for (const auto& rec : read_metrics(dir / "run")) {
        if (rec.at("kind") == "managed_collision" && rec.at("table") == "t_cat_0") {
            evictions += std::stoll(rec.at("evictions"));
        }
    }
    CHECK(evictions > 0);

    // The checkpoint holds the remap: eval reads it, and a quantized model scores every row.
    const std::string ckpt = (dir / "run" / "checkpoints").string();
    r = run_shardrec({"eval", config.string(), "--checkpoint", ckpt});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("\"auc\":") != std::string::npos);
    const std::string model = (dir / "model").string();
    r = run_shardrec({"ckpt", "quantize", ckpt, "--out", model, "--weights", "f32"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_shardrec({"predict", model, "--data", (dir / "data").string(), "--out",
                      (dir / "scores.csv").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(csv_column(dir / "scores.csv", 0).size() == 500);
    // The TSV days themselves, hashed with the training data's layout (raw ids included), on two
    // ranks: the same scores; the shards made on the way are gone.
    r = run_shardrec({"predict", model, "--data", days[0] + "," + days[1], "--out",
                      (dir / "scores_tsv.csv").string()},
                     "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_bytes(dir / "scores_tsv.csv") == read_bytes(dir / "scores.csv"));
    CHECK(!fs::exists(dir / "scores_tsv.csv.tsv-shards"));
    {  // a bad line: named, with predict's own remedy, and the shards made on the way are gone
        std::ifstream in(days[0]);
        std::string line;
        std::getline(in, line);
        std::ofstream(dir / "bad.tsv") << "x" << line << "\n";  // the label is not 0 or 1
        r = run_shardrec({"predict", model, "--data", (dir / "bad.tsv").string(), "--out",
                          (dir / "bad.csv").string()});
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains((dir / "bad.tsv").string() + ":1:") &&
                                 Contains("predict scores every line of its input") &&
                                 !Contains("--skip-bad-lines"));
        CHECK(!fs::exists(dir / "bad.csv.tsv-shards"));
        // An empty or missing TSV: named; nothing left behind.
        std::ofstream(dir / "empty.tsv").flush();
        r = run_shardrec({"predict", model, "--data", (dir / "empty.tsv").string(), "--out",
                          (dir / "empty.csv").string()});
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("empty.tsv: no lines to score"));
        CHECK(!fs::exists(dir / "empty.csv.tsv-shards"));
        r = run_shardrec({"predict", model, "--data", (dir / "nope.tsv").string(), "--out",
                          (dir / "nope.csv").string()});
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("'" + (dir / "nope.tsv").string() + "' does not exist"));
    }
    {  // Shards whose ids are not the training data's (cat_0 mod 64, not raw): refused by name.
        r = run_shardrec(preprocess_args(days, dir / "mod", {"--max-ind-range", "64"}));
        REQUIRE(r.exit_code == 0);
        r = run_shardrec({"predict", model, "--data", (dir / "mod").string(), "--out",
                          (dir / "mod.csv").string()});
        INFO(r.output);
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, Contains("feature 'cat_0' holds ids mod 64 (1 a sample), but the "
                                      "model's training data") &&
                                 Contains("held raw 64-bit ids"));
        CHECK(!fs::exists(dir / "mod.csv"));
    }
    {  // eval --model with a --checkpoint that is not there: an error, not a missing column
        r = run_shardrec(
            {"eval", config.string(), "--model", model, "--checkpoint", (dir / "nope").string()});
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output,
                   Contains("--checkpoint '" + (dir / "nope").string() + "': no checkpoint there"));
    }

    // A raw-id feature on a table without managed_collision: refused before training, by name.
    std::ofstream(config) << raw_id_config(dir / "data", false);
    r = run_shardrec({"train", config.string(), "--out", (dir / "unmanaged").string()});
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("feature 'cat_1' holds raw 64-bit ids (criteo-preprocess --raw-ids) but "
                        "its table 't_cat_1' has no managed_collision") != std::string::npos);
    CHECK(r.output.find("or preprocess without --raw-ids") != std::string::npos);
    CHECK(!fs::exists(dir / "unmanaged" / "metrics.jsonl"));

    // --raw-ids alone: every feature, so the plain table of cat_2 is refused too.
    r = run_shardrec(preprocess_args(days, dir / "all", {"--raw-ids"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::ofstream(config) << raw_id_config(dir / "all", true);
    r = run_shardrec({"train", config.string(), "--out", (dir / "all_run").string()});
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("feature 'cat_2' holds raw 64-bit ids") != std::string::npos);

    // Raw ids are one-hot, and LIST names features.
    r = run_shardrec(
        preprocess_args(days, dir / "bad", {"--raw-ids", "cat_3", "--multi-hot", "mlperf"}));
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("--raw-ids: cat_3 has multi-hot size 2, but raw ids are one-hot") !=
          std::string::npos);
    r = run_shardrec(preprocess_args(days, dir / "bad", {"--raw-ids", "cat_0,C5"}));
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("--raw-ids: 'C5' is not a categorical feature") != std::string::npos);
    r = run_shardrec({"data", "--help"});
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("[--raw-ids [LIST]]") != std::string::npos);
    CHECK(r.output.find("or v itself with --raw-ids") != std::string::npos);
}

TEST_CASE("criteo e2e: plan predicts a key_value table's hit rate from the data's own ids",
          "[e2e]") {
    // 1000-row tables over a vocabulary of 500 values a feature: about 400 rows in use, so a 10 %
    // cache holds far more of what a batch touches than the tenth that uniform ids over the rows
    // would give. plan measures it on the first global batches (CacheStatistics: 0.42-0.50); a
    // run's LRU measures it beside (0.35-0.39).
    const fs::path dir = fresh_dir("criteo_cache_stats");
    const auto days = write_days(dir, {3000, 500});
    RunResult r = run_shardrec(preprocess_args(days, dir / "data", {"--max-ind-range", "1000"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::string config = criteo_config(dir / "data");
    for (size_t at = config.find("num_embeddings: 64"); at != std::string::npos;
         at = config.find("num_embeddings: 64"))
        config.replace(at, 18, "num_embeddings: 1000");
    config += "sharding: {compute_kernel: key_value, storage: {path: " + (dir / "kv").string() +
              "}, cache: {load_factor: 0.1}}\n";
    std::ofstream(dir / "kv.yaml") << config;
    r = run_shardrec({"train", (dir / "kv.yaml").string(), "--out", (dir / "run").string(), "--set",
                      "train.steps=150", "--set", "train.log_every=50"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_shardrec({"plan", (dir / "kv.yaml").string(), "--world-size", "1", "--measured",
                      (dir / "run").string()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("ideal cache on the criteo_binary data (its first 16 global "
                                  "batches), measured by a run"));
    // "    t_cat_0 | rows | slots | MiB | GiB | ids | predicted | measured"
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m,
                              std::regex(R"( t_cat_0 \|.*\| +([0-9.]+) \| +([0-9.]+)\n)")));
    const double predicted = std::stod(m[1]), measured = std::stod(m[2]);
    CHECK(predicted > 0.15);  // uniform ids over the rows: 0.1
    CHECK(std::fabs(predicted - measured) < 0.1);
}
