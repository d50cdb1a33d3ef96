// `shardrec predict` end to end: the quickstart (one table mean-pooled, so that both pooling
// groups of QuantEmbeddingBagCollection run, one with long bags) trained on 2 ranks with its mixed
// plan, quantized, and scored at 1 to 4 ranks with the tables sharded by that plan
// (ShardedQuantEmbeddingBag- Collection) or replicated: the same scores at every world size; with
// --weights f32 the same scores as `eval --predictions` of the checkpoint. Bad input fails on every
// rank with a message naming what is wrong and leaves no output file.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string mpirun(int np) {
    return "timeout -k 10 300 mpirun -np " + std::to_string(np) +
           " --allow-run-as-root --oversubscribe";
}

}  // namespace

TEST_CASE("predict: the same scores at any world size and eval's at f32", "[e2e][mpi]") {
    const fs::path dir = fresh_dir("predict");
    std::string yaml = read_file(repo_root() / "configs" / "quickstart.yaml");
    const std::string t4 = "{name: t4, num_embeddings: 1000, pooling_factor: 3}";
    REQUIRE(yaml.find(t4) != std::string::npos);
    yaml.replace(yaml.find(t4), t4.size(),
                 "{name: t4, num_embeddings: 1000, pooling_factor: 3, pooling: mean}");
    // Learned position weights (a feature-processed collection) on a row_wise table: applied
    // before the quantized lookup in one process, on the shard's rank in a sharded one.
    const std::string t2 = "{name: t2, num_embeddings: 5000, pooling_factor: 2}";
    REQUIRE(yaml.find(t2) != std::string::npos);
    yaml.replace(yaml.find(t2), t2.size(),
                 "{name: t2, num_embeddings: 5000, pooling_factor: 2, position_weights: 4}");
    const std::string dp = "    - {name: t4, sharding_type: data_parallel}\n";
    REQUIRE(yaml.find(dp) != std::string::npos);
    yaml.insert(yaml.find(dp) + dp.size(), "    - {name: t2, sharding_type: row_wise}\n");
    // Long bags: a sum over ids of several row shards is added in another order than one
    // process adds it unless each bag is pooled whole.
    const std::string t7 = "{name: t7, num_embeddings: 15000, pooling_factor: 2}";
    REQUIRE(yaml.find(t7) != std::string::npos);
    yaml.replace(yaml.find(t7), t7.size(), "{name: t7, num_embeddings: 15000, pooling_factor: 12}");
    const fs::path config = dir / "config.yaml";
    std::ofstream(config) << yaml;
    const RunResult t = run_shardrec(
        {"train", config.string(), "--out", (dir / "run").string(), "--set", "train.steps=40",
         "--set", "train.eval_every=0", "--set", "train.checkpoint_every=40", "--set",
         "train.eval_samples=1000", "--set", "data.batch_size=128"},
        mpirun(2));
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const std::string ckpt = (dir / "run" / "checkpoints").string();
    const std::string m4 = (dir / "model_int4").string(), m32 = (dir / "model_f32").string();
    // int4 with one int8 table: mixed types in one lookup; f32 all through.
    for (const auto& [out, tables] : {std::pair{m4, "t0=int8"}, std::pair{m32, ""}}) {
        std::vector<std::string> q = {
            "ckpt", "quantize", ckpt, "--out", out, "--weights", out == m4 ? "int4" : "f32"};
        if (*tables != '\0') {
            q.push_back("--tables");
            q.push_back(tables);
        }
        const RunResult r = run_shardrec(q, "timeout 120");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
    }

    {  // np 1, 2, 3 and 4: the quickstart's plan (row_wise, column_wise, data_parallel and
       // table_wise tables) shards the model over the ranks; the 8 chunks of 128 leave a rank
       // without a chunk in the last round at np 3, and the last chunk is partial. Every plan
       // gives the bytes of one process: row-sharded tables send their rows, not partial sums,
       // and pool them where the samples are (every table row_wise at np 3: uneven blocks;
       // table_row_wise on 2 nodes of 2).
        // int4 rows (fp16 scale and bias, 4-bit codes) carry so few bits that their sums come
        // out exact in any order: the f32 model's rows test the order too.
        std::map<std::string, std::string> first;
        const std::vector<std::tuple<std::string, int, std::string, std::string>> runs = {
            {m4, 1, "", ""},
            {m4, 2, "", ""},
            {m4, 3, "", ""},
            {m4, 4, "", ""},
            {m4, 2, "--replicated", ""},
            {m4, 3, "table_wise", "sharding.sharding_type=table_wise"},
            {m32, 1, "", ""},
            {m32, 2, "", ""},
            {m32, 2, "--replicated", ""},
            {m32, 3, "row_wise", "sharding.sharding_type=row_wise"},
            {m32, 4, "table_row_wise", "sharding.sharding_type=table_row_wise"}};
        for (const auto& [model, np, mode, type] : runs) {
            const fs::path out = dir / ("scores_" + fs::path(model).filename().string() +
                                        std::to_string(np) + mode + ".bin");
            // The run's config.yaml is found from the model's checkpoint: no --config.
            std::vector<std::string> args = {"predict",   model,   "--data",
                                             "synthetic", "--out", out.string()};
            if (mode == "--replicated")
                args.push_back(mode);
            if (!type.empty())
                args.insert(args.end(), {"--set", type, "--set", "sharding.tables=[]"});
            const std::string launch =
                mode == "table_row_wise" ? mpirun(np) + " -x SHARDREC_LOCAL_SIZE=2" : mpirun(np);
            const RunResult p = run_shardrec(args, launch);
            INFO(p.output);
            REQUIRE(p.exit_code == 0);
            CHECK_THAT(p.output, Contains("\"kind\":\"predict\",\"samples\":1000,"));
            CHECK_THAT(p.output, Contains("\"host_copy_gbps\":"));
            const bool sharded = np > 1 && mode != "--replicated";
            CHECK_THAT(p.output, Contains(sharded ? "\"sharded\":true" : "\"sharded\":false"));
            if (np == 4 && model == m4) {  // each rank holds its shards: under 1 of the 1.36 MB
                const auto at = p.output.find("\"table_mb_per_rank\":");
                REQUIRE(at != std::string::npos);
                CHECK(std::stod(p.output.substr(at + 20)) < 1.0);
            }
            CHECK(!fs::exists(out.string() + ".tmp"));
            const std::string bytes = read_file(out);
            REQUIRE(bytes.size() == 1000 * sizeof(float));
            if (np == 1)
                first[model] = bytes;
            CHECK(bytes == first[model]);
        }
        // --samples: the same scores for the whole chunks it shares with the full run (a last,
        // partial chunk is a smaller GEMM, whose blocking may round differently).
        const fs::path out = dir / "prefix.bin";
        const RunResult p = run_shardrec(
            {"predict", m4, "--data", "synthetic", "--out", out.string(), "--samples", "300"},
            mpirun(2));
        INFO(p.output);
        REQUIRE(p.exit_code == 0);
        const std::string prefix = read_file(out);
        REQUIRE(prefix.size() == 300 * sizeof(float));
        CHECK(prefix.substr(0, 256 * sizeof(float)) == first[m4].substr(0, 256 * sizeof(float)));
    }

    {  // --weights f32 gives eval --predictions' scores, digit for digit, sharded
        // eval on one rank reads the eval split in batches of data.batch_size, as predict's
        // chunks are: the same samples go through the same dense layers.
        const fs::path pred = dir / "eval.csv";
        const RunResult e = run_shardrec({"eval", (dir / "run" / "config.yaml").string(),
                                          "--checkpoint", ckpt, "--predictions", pred.string()},
                                         "timeout -k 10 300");
        INFO(e.output);
        REQUIRE(e.exit_code == 0);
        const fs::path out = dir / "f32.csv";
        const RunResult p =
            run_shardrec({"predict", m32, "--data", "synthetic", "--out", out.string(), "--config",
                          (dir / "run" / "config.yaml").string()},
                         mpirun(2));  // sharded; the runs above give --replicated's bytes too
        INFO(p.output);
        REQUIRE(p.exit_code == 0);
        const std::vector<std::string> scores = csv_column(out, 0);
        std::vector<std::string> expected = csv_column(pred, 1);
        REQUIRE(expected.size() >= scores.size());  // eval rounds up to whole batches
        expected.resize(scores.size());
        REQUIRE(scores.size() == 1000);
        CHECK(scores == expected);
    }

    {  // bad input: a clear error and a non-zero exit on every rank, no output
        const fs::path out = dir / "bad.csv";
        const RunResult missing = run_shardrec(
            {"predict", (dir / "nope").string(), "--data", "synthetic", "--out", out.string()},
            mpirun(2));
        CHECK(missing.exit_code != 0);
        CHECK_THAT(missing.output,
                   Contains("model directory '" + (dir / "nope").string() + "' does not exist"));

        const fs::path damaged = dir / "damaged";
        fs::copy(m4, damaged, fs::copy_options::recursive);
        {
            std::fstream f(damaged / "tables" / "t3.int4.bin",
                           std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(7);
            f.put('\x5a');
        }
        const RunResult corrupt = run_shardrec(
            {"predict", damaged.string(), "--data", "synthetic", "--out", out.string()}, mpirun(2));
        CHECK(corrupt.exit_code != 0);
        CHECK_THAT(corrupt.output, Contains("tables/t3.int4.bin is corrupt"));

        std::ofstream(dir / "a_file") << "x";
        const fs::path unwritable = dir / "a_file" / "scores.csv";
        const RunResult nodir = run_shardrec(
            {"predict", m4, "--data", "synthetic", "--out", unwritable.string()}, mpirun(2));
        CHECK(nodir.exit_code != 0);
        CHECK_THAT(nodir.output, Contains("--out '" + unwritable.string() + "'"));

        // A Criteo TSV is hashed with the training data's layout, which a synthetic-data model
        // does not have: refused, naming the way.
        std::ofstream(dir / "day.tsv") << "1\t2\n";
        const RunResult tsv = run_shardrec(
            {"predict", m4, "--data", (dir / "day.tsv").string(), "--out", out.string()},
            mpirun(2));
        CHECK(tsv.exit_code != 0);
        CHECK_THAT(tsv.output, Contains("data.type 'synthetic', not criteo_binary"));

        // Without --config only the config of the run that wrote the checkpoint is taken: not
        // the run directory's once it holds another run, not a config.yaml that lies beside a
        // checkpoint of ckpt import (dir/config.yaml, the parent of imported/step-00000000).
        const std::string run_yaml = read_file(dir / "run" / "run.yaml");
        std::ofstream(dir / "run" / "run.yaml") << "run_id: another-run\n";
        const RunResult other =
            run_shardrec({"predict", m4, "--data", "synthetic", "--out", out.string()}, mpirun(2));
        std::ofstream(dir / "run" / "run.yaml") << run_yaml;
        CHECK(other.exit_code != 0);
        CHECK_THAT(other.output,
                   Contains("it holds run another-run") && Contains("pass --config CONFIG.yaml"));
        const fs::path exported = dir / "exported", imported = dir / "imported";
        for (const std::vector<std::string>& step :
             {std::vector<std::string>{"ckpt", "export", ckpt, "--format", "safetensors", "--out",
                                       exported.string()},
              std::vector<std::string>{"ckpt", "import", (exported / "model.safetensors").string(),
                                       config.string(), "--out", imported.string()},
              std::vector<std::string>{"ckpt", "quantize", imported.string(), "--out",
                                       (dir / "model_imported").string(), "--weights", "int8"}}) {
            const RunResult r = run_shardrec(step, "timeout 120");
            INFO(r.output);
            REQUIRE(r.exit_code == 0);
        }
        const RunResult stray = run_shardrec({"predict", (dir / "model_imported").string(),
                                              "--data", "synthetic", "--out", out.string()},
                                             mpirun(2));
        CHECK(stray.exit_code != 0);
        CHECK_THAT(stray.output, Contains("was not written by a training run") &&
                                     Contains("pass --config CONFIG.yaml"));

        const RunResult ext =
            run_shardrec({"predict", m4, "--data", "synthetic", "--out", "scores.txt"});
        CHECK(ext.exit_code == 2);
        CHECK_THAT(ext.output, Contains("must end in .csv or .bin"));
        CHECK(!fs::exists(out));
        CHECK(!fs::exists(out.string() + ".tmp"));
    }
}
