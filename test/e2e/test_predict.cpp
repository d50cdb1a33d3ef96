// `shardrec predict` end to end: the quickstart (one table mean-pooled, so that both pooling
// groups of QuantEmbeddingBagCollection run) trained on 2 ranks with its mixed plan, quantized,
// and scored at 1 to 4 ranks with the tables sharded by that plan (ShardedQuantEmbeddingBag-
// Collection) or replicated: the same scores at every world size; with --weights f32 the same
// scores as `eval --predictions` of the checkpoint. Bad input fails on every rank with a
// message naming what is wrong and leaves no output file.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

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
       // without a chunk in the last round at np 3, and the last chunk is partial. Table-wise
       // tables, and --replicated (the whole model on every rank), give the bytes of one process;
       // row-sharded tables add partial sums in another order (the last bits).
        std::string first;
        const std::string table_wise = "sharding.sharding_type=table_wise";
        for (const auto& [np, mode] :
             {std::pair{1, ""}, std::pair{2, ""}, std::pair{3, ""}, std::pair{4, ""},
              std::pair{2, "--replicated"}, std::pair{3, "table_wise"}}) {
            const fs::path out = dir / ("scores_" + std::to_string(np) + mode + ".bin");
            // The run's config.yaml is found from the model's checkpoint: no --config.
            std::vector<std::string> args = {"predict",   m4,      "--data",
                                             "synthetic", "--out", out.string()};
            const std::string m = mode;
            if (m == "--replicated")
                args.push_back(m);
            if (m == "table_wise")
                args.insert(args.end(), {"--set", table_wise, "--set", "sharding.tables=[]"});
            const RunResult p = run_shardrec(args, mpirun(np));
            INFO(p.output);
            REQUIRE(p.exit_code == 0);
            CHECK_THAT(p.output, Contains("\"kind\":\"predict\",\"samples\":1000,"));
            CHECK_THAT(p.output, Contains("\"host_copy_gbps\":"));
            const bool sharded = np > 1 && m != "--replicated";
            CHECK_THAT(p.output, Contains(sharded ? "\"sharded\":true" : "\"sharded\":false"));
            if (np == 4) {  // each rank holds its shards: about half of the 1.36 MB at most
                const auto at = p.output.find("\"table_mb_per_rank\":");
                REQUIRE(at != std::string::npos);
                CHECK(std::stod(p.output.substr(at + 20)) < 1.0);
            }
            CHECK(!fs::exists(out.string() + ".tmp"));
            const std::string bytes = read_file(out);
            REQUIRE(bytes.size() == 1000 * sizeof(float));
            if (np == 1)
                first = bytes;
            if (!sharded || m == "table_wise") {
                CHECK(bytes == first);
                continue;
            }
            std::vector<float> got(1000), want(1000);
            std::memcpy(got.data(), bytes.data(), bytes.size());
            std::memcpy(want.data(), first.data(), first.size());
            for (size_t i = 0; i < got.size(); ++i) {
                INFO("sample " << i);
                CHECK(std::abs(got[i] - want[i]) <= 1e-6f);
            }
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
        CHECK(prefix.substr(0, 256 * sizeof(float)) == first.substr(0, 256 * sizeof(float)));
    }

    {  // --weights f32 gives eval --predictions' scores, digit for digit
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
                          (dir / "run" / "config.yaml").string(), "--replicated"},
                         mpirun(2));
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

        const RunResult ext =
            run_shardrec({"predict", m4, "--data", "synthetic", "--out", "scores.txt"});
        CHECK(ext.exit_code == 2);
        CHECK_THAT(ext.output, Contains("must end in .csv or .bin"));
        CHECK(!fs::exists(out));
        CHECK(!fs::exists(out.string() + ".tmp"));
    }
}
