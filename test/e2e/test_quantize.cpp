// `shardrec ckpt quantize` and `shardrec eval --model` end to end: the quickstart trained with a
// checkpoint (2 ranks, its mixed plan), quantized to fp16, int8, int4 (t0 int8 and t2 fp8: three
// types in one lookup) and fp8, each evaluated next to the f32 checkpoint on the same held-out
// samples. Targets: int8 AUC within 0.0005 of f32, int4 and fp8 within 0.003, fp16 within
// 0.0001. A damaged table file is refused naming the file, an unknown type naming the choices.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;

namespace {

JsonRecord quantized_line(const std::string& output) {
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("{\"kind\":\"eval_quantized\"", 0) == 0) {
            const auto dir = fresh_dir("quantized_line");
            std::ofstream(dir / "metrics.jsonl") << line << "\n";
            return read_metrics(dir).at(0);
        }
    }
    FAIL("no eval_quantized line in the output");
    return {};
}

}  // namespace

TEST_CASE("ckpt quantize: int8, int4, fp8 and fp16 models evaluate within their AUC targets",
          "[e2e][mpi]") {
    const auto dir = fresh_dir("quantize");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const std::vector<std::string> sets = {"--set", "train.eval_samples=16384", "--set",
                                           "data.batch_size=256"};
    std::vector<std::string> train = {"train", config,
                                      "--out", (dir / "run").string(),
                                      "--set", "train.steps=300",
                                      "--set", "train.eval_every=0",
                                      "--set", "train.checkpoint_every=300"};
    train.insert(train.end(), sets.begin(), sets.end());
    const RunResult t =
        run_shardrec(train, "timeout -k 10 600 mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const std::string ckpt = (dir / "run" / "checkpoints").string();

    struct Target {
        std::string weights, tables;
        double auc_delta;
    };

    for (const Target& target : {Target{"fp16", "", 1e-4}, Target{"int8", "", 5e-4},
                                 Target{"int4", "t0=int8,t2=fp8", 3e-3}, Target{"fp8", "", 3e-3}}) {
        const std::string model = (dir / ("model_" + target.weights)).string();
        std::vector<std::string> q = {"ckpt", "quantize",  ckpt,          "--out",
                                      model,  "--weights", target.weights};
        if (!target.tables.empty()) {
            q.push_back("--tables");
            q.push_back(target.tables);
        }
        const RunResult qr = run_shardrec(q, "timeout -k 10 300");
        INFO(qr.output);
        REQUIRE(qr.exit_code == 0);
        const std::string manifest = read_file(model + "/manifest.yaml");
        CHECK_THAT(manifest, Contains("weights: " + target.weights));
        if (target.weights == "fp8")  // dim 16: 16 codes + the f32 scale, padded to 32 bytes
            CHECK_THAT(manifest, Contains("{name: t0, type: fp8, num_embeddings: 20000, "
                                          "embedding_dim: 16, row_bytes: 32, file: "
                                          "tables/t0.fp8.bin}"));
        if (target.weights == "int4")
            CHECK_THAT(manifest, Contains("file: tables/t2.fp8.bin"));
        std::vector<std::string> eval = {"eval", config, "--model", model};
        eval.insert(eval.end(), sets.begin(), sets.end());
        eval.push_back("--set");  // one rank, the same global batch: the same eval samples
        eval.push_back("data.batch_size=512");
        const RunResult e = run_shardrec(eval, "timeout -k 10 300");
        INFO(e.output);
        REQUIRE(e.exit_code == 0);
        const JsonRecord r = quantized_line(e.output);
        const double auc = std::stod(r.at("auc")), f32_auc = std::stod(r.at("f32_auc"));
        std::printf(
            "%s: auc %.6f (f32 %.6f, delta %+.6f), ne %s (f32 %s), calibration %s (f32 "
            "%s), bytes %s (f32 %s)\n",
            target.weights.c_str(), auc, f32_auc, auc - f32_auc, r.at("ne").c_str(),
            r.at("f32_ne").c_str(), r.at("calibration").c_str(), r.at("f32_calibration").c_str(),
            r.at("bytes").c_str(), r.at("f32_bytes").c_str());
        CHECK(r.at("count") == "16384");
        CHECK(std::abs(auc - f32_auc) <= target.auc_delta);
        CHECK(std::abs(std::stod(r.at("ne")) - std::stod(r.at("f32_ne"))) <= 20 * target.auc_delta);
        CHECK(std::stod(r.at("bytes")) < std::stod(r.at("f32_bytes")));
        if (target.weights == "int4")
            CHECK_THAT(e.output, Contains("\"tables\":\"t0=int8,t1=int4,t2=fp8,t3=int4,"));
    }
    // The int8 model's tables are 16 + 4 bytes padded to 32 per row: 2x smaller than f32.
    const std::string int8_model = (dir / "model_int8").string();
    {
        std::fstream f(int8_model + "/tables/t3.int8.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('\x5a');
    }
    std::vector<std::string> eval = {"eval", config, "--model", int8_model};
    eval.insert(eval.end(), sets.begin(), sets.end());
    const RunResult bad = run_shardrec(eval, "timeout -k 10 300");
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.output, Contains("tables/t3.int8.bin"));
    // An existing --out is refused, and a table override must name a table.
    const RunResult again = run_shardrec(
        {"ckpt", "quantize", ckpt, "--out", int8_model, "--weights", "int8"}, "timeout 60");
    CHECK(again.exit_code == 1);
    CHECK_THAT(again.output, Contains("already exists"));
    const RunResult typo = run_shardrec({"ckpt", "quantize", ckpt, "--out", (dir / "m").string(),
                                         "--weights", "int8", "--tables", "t9=int4"},
                                        "timeout 60");
    CHECK(typo.exit_code == 1);
    CHECK_THAT(typo.output, Contains("no table 't9'"));
    const RunResult unknown =
        run_shardrec({"ckpt", "quantize", ckpt, "--out", (dir / "m").string(), "--weights", "fp4"},
                     "timeout 60");
    CHECK(unknown.exit_code == 1);
    CHECK_THAT(unknown.output, Contains("unknown weight type 'fp4'"));
    CHECK_THAT(unknown.output, Contains("int2 or fp8"));
}

namespace {

// /usr/bin/time's line (the prefix below): the command's peak resident set, MB.
double peak_rss_mb(const std::string& output) {
    const size_t at = output.rfind("peak_rss_kb ");
    REQUIRE(at != std::string::npos);
    return std::stod(output.substr(at + 12)) / 1024.0;
}

const std::string kTimed = "timeout -k 10 300 /usr/bin/time -f 'peak_rss_kb %M'";

}  // namespace

TEST_CASE(
    "ckpt quantize, ckpt export and eval --model pass a key_value table bigger than their "
    "memory block by block",
    "[e2e][key_value]") {
    // t0: 8M rows of dim 16, 512 MB in f32, trained as key_value: the checkpoint holds only the
    // rows touched. Each tool must hold well under the f32 table beyond what the process holds
    // at start (reading the table whole took 1.5-2x the table).
    const auto dir = fresh_dir("quantize_large");
    const std::vector<std::string> big = {
        "model.tables[0].num_embeddings=8000000", "sharding.compute_kernel=key_value",
        "sharding.storage.path=" + (dir / "kv").string(), "sharding.cache.load_factor=0.01"};
    std::vector<std::string> train = small_train_args(dir / "run", 20, big);
    train.insert(train.end(), {"--set", "train.checkpoint_every=20"});
    const RunResult t = run_shardrec(train, "timeout -k 10 300");
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const double table_mb = 8e6 * 16 * 4 / 1048576.0;
    // What the process holds before any work (the libraries: about 230 MB with the CUDA ones).
    const RunResult version = run_shardrec({"--version"}, kTimed);
    REQUIRE(version.exit_code == 0);
    const double base_mb = peak_rss_mb(version.output);
    const std::string ckpt = (dir / "run" / "checkpoints").string();
    const std::string model = (dir / "model").string();

    const RunResult q =
        run_shardrec({"ckpt", "quantize", ckpt, "--out", model, "--weights", "int8"}, kTimed);
    INFO(q.output);
    REQUIRE(q.exit_code == 0);
    CHECK(std::filesystem::file_size(model + "/tables/t0.int8.bin") == 8000000u * 32);
    CHECK(peak_rss_mb(q.output) - base_mb < table_mb / 4);

    const RunResult x = run_shardrec(
        {"ckpt", "export", ckpt, "--format", "safetensors", "--out", (dir / "export").string()},
        kTimed);
    INFO(x.output);
    REQUIRE(x.exit_code == 0);
    CHECK(std::filesystem::file_size(dir / "export" / "model.safetensors") > 8000000u * 64);
    CHECK(peak_rss_mb(x.output) - base_mb < table_mb / 4);

    // The same training with t0 in memory (every row saved) quantizes to the same bytes: the
    // blocks of the key_value checkpoint put its rows not saved at their initial value.
    train = small_train_args(dir / "run_fused", 20, {"model.tables[0].num_embeddings=8000000"});
    train.insert(train.end(), {"--set", "train.checkpoint_every=20"});
    REQUIRE(run_shardrec(train, "timeout -k 10 300").exit_code == 0);
    const RunResult qf =
        run_shardrec({"ckpt", "quantize", (dir / "run_fused" / "checkpoints").string(), "--out",
                      model + "_fused", "--weights", "int8"},
                     "timeout -k 10 300");
    REQUIRE(qf.exit_code == 0);
    CHECK(read_file(model + "/tables/t0.int8.bin") ==
          read_file(model + "_fused/tables/t0.int8.bin"));

    // eval --model with t0 key_value: each row dequantized as a lookup first needs it; the same
    // numbers as with t0 dequantized whole into memory (fused).
    const std::string config = (dir / "run" / "config.yaml").string();
    const auto eval = [&](const std::string& kernel) {
        return run_shardrec(
            {"eval", config, "--model", model, "--set", "sharding.compute_kernel=" + kernel},
            kTimed);
    };
    const RunResult kv = eval("key_value");
    INFO(kv.output);
    REQUIRE(kv.exit_code == 0);
    CHECK(peak_rss_mb(kv.output) - base_mb < table_mb / 2);  // with the f32 checkpoint's eval
    const RunResult fused = eval("fused");
    INFO(fused.output);
    REQUIRE(fused.exit_code == 0);
    const JsonRecord a = quantized_line(kv.output), b = quantized_line(fused.output);
    CHECK(a.at("count") == "256");
    CHECK(a.at("auc") == b.at("auc"));
    CHECK(a.at("loss") == b.at("loss"));
    CHECK(a.at("f32_auc") == b.at("f32_auc"));
    CHECK(a.at("ne") != a.at("f32_ne"));  // int8 rows, not the checkpoint's

    // predict, sharded over 2 ranks by the run's config (t0 key_value there): the int8 rows are
    // read mapped from the model, as for a table trained in memory.
    const RunResult p =
        run_shardrec({"predict", model, "--data", "synthetic", "--samples", "256", "--out",
                      (dir / "scores.csv").string()},
                     "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe");
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    CHECK_THAT(p.output, Contains("tables t0 (key_value), t1 (key_value)"));
    CHECK(csv_column(dir / "scores.csv", 0).size() == 256);
}
