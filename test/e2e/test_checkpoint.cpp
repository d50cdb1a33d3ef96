// Checkpoints end to end with the real binary: 2N steps straight and N steps, then --resume for N
// more, write bitwise-identical metrics and checkpoints (at 1 and 2 ranks, and resuming on
// another world size); ckpt info and export read what train wrote; a corrupted file is refused.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_export.h"
#include "test/e2e/e2e_support.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kMpirun2 = "timeout -k 10 300 mpirun -np 2 --allow-run-as-root --oversubscribe";

// The quickstart model, small batches, a loss line every step.
std::vector<std::string> train_args(const fs::path& run,
                                    int steps,
                                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "train", (repo_root() / "configs" / "quickstart.yaml").string(),
        "--out", run.string(),
        "--set", "train.steps=" + std::to_string(steps),
        "--set", "train.log_every=1",
        "--set", "train.eval_every=4",
        "--set", "train.eval_samples=256",
        "--set", "data.batch_size=16",
        "--set", "train.checkpoint_every=4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

// Lines of metrics.jsonl from step `from` on, without timings.
std::vector<std::string> numbers(const fs::path& run, int from) {
    std::vector<std::string> out;
    for (const auto& r : read_metrics(run)) {
        const auto step = r.find("step");
        if (step == r.end() || std::stoi(step->second) < from)
            continue;
        std::string line = r.at("kind") + " " + step->second;
        for (const char* key : {"loss", "lr", "auc", "ne", "accuracy"}) {
            if (r.count(key))
                line += std::string(" ") + key + "=" + r.at(key);
        }
        out.push_back(line);
    }
    return out;
}

// path -> crc32 of every file of a checkpoint.
std::map<std::string, uint32_t> crcs(const fs::path& ckpt) {
    std::map<std::string, uint32_t> out;
    for (const auto& f : shardrec::train::read_manifest(ckpt.string()).files)
        out[f.path] = f.crc32;
    return out;
}

void check_exact_resume(const std::string& prefix,
                        const std::string& resume_prefix,
                        const std::string& name) {
    const auto dir = fresh_dir(name);
    const RunResult straight = run_shardrec(train_args(dir / "straight", 8), prefix);
    INFO(straight.output);
    REQUIRE(straight.exit_code == 0);
    const RunResult first = run_shardrec(train_args(dir / "first", 4), prefix);
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    auto args = train_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", (dir / "first" / "checkpoints").string()});
    const RunResult resumed = run_shardrec(args, resume_prefix);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto want = numbers(dir / "straight", 5);
    REQUIRE(want.size() == 5);  // train 5..8, eval 8
    CHECK(numbers(dir / "resumed", 0) == want);
    if (prefix == resume_prefix) {  // the same plan: every byte of the model and optimizer
        CHECK(crcs(dir / "resumed" / "checkpoints" / "step-00000008") ==
              crcs(dir / "straight" / "checkpoints" / "step-00000008"));
    }
}

std::vector<char> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("checkpoint e2e: N steps, --resume, N more equals 2N straight on one rank",
          "[e2e][checkpoint]") {
    check_exact_resume("", "", "ckpt_np1");
}

TEST_CASE("checkpoint e2e: N steps, --resume, N more equals 2N straight on two ranks",
          "[e2e][checkpoint]") {
    check_exact_resume(kMpirun2, kMpirun2, "ckpt_np2");
}

TEST_CASE("checkpoint e2e: two ranks table_wise resume on one rank", "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_reshard");
    const RunResult first =
        run_shardrec(train_args(dir / "first", 4, {"--set", "data.batch_size=8"}), kMpirun2);
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    auto args = train_args(dir / "resumed", 6);
    args.insert(args.end(),
                {"--resume", (dir / "first" / "checkpoints" / "step-00000004").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Contains("written by 2 rank(s)"));
    CHECK(numbers(dir / "resumed", 0).size() == 3);  // train 5, 6 and eval 6
}

TEST_CASE("checkpoint e2e: ckpt info, export npy and safetensors, a corrupt file refused",
          "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_tools");
    const RunResult run = run_shardrec(train_args(dir / "run", 4), kMpirun2);
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const fs::path ckpt = dir / "run" / "checkpoints" / "step-00000004";

    const RunResult info = run_shardrec({"ckpt", "info", (dir / "run" / "checkpoints").string()});
    INFO(info.output);
    CHECK(info.exit_code == 0);
    CHECK_THAT(info.output, Contains("step 4") && Contains("written by 2 rank(s)") &&
                                Contains("t7") && Contains("checksums: ok"));

    const RunResult npy = run_shardrec(
        {"ckpt", "export", ckpt.string(), "--format", "npy", "--out", (dir / "npy").string()});
    INFO(npy.output);
    REQUIRE(npy.exit_code == 0);
    const auto t0 = read_bytes(dir / "npy" / (shardrec::train::table_export_name("t0") + ".npy"));
    REQUIRE(t0.size() > 128);
    CHECK(std::string(t0.data() + 1, 5) == "NUMPY");
    CHECK_THAT(std::string(t0.data(), 128), Contains("'shape': (20000, 16)"));
    CHECK(t0.size() == 128 + 20000 * 16 * 4);
    CHECK(fs::exists(dir / "npy" / "dense_arch.model._mlp.0._linear.weight.npy"));
    // Not over an earlier export (its files would mix with these), nor onto a file.
    const RunResult again = run_shardrec(
        {"ckpt", "export", ckpt.string(), "--format", "npy", "--out", (dir / "npy").string()});
    CHECK(again.exit_code == 1);
    CHECK_THAT(again.output, Contains("ckpt export: --out '" + (dir / "npy").string() +
                                      "' already holds files; remove it or choose another --out"));
    // A quantized model and a checkpoint, each given where the other belongs: named.
    const RunResult model = run_shardrec(
        {"predict", ckpt.string(), "--data", "synthetic", "--out", (dir / "p.csv").string()});
    CHECK(model.exit_code == 1);
    CHECK_THAT(model.output, Contains("a training checkpoint: make a model of it with `shardrec "
                                      "ckpt quantize`"));

    const RunResult st = run_shardrec({"ckpt", "export", ckpt.string(), "--format", "safetensors",
                                       "--out", (dir / "st").string()});
    INFO(st.output);
    REQUIRE(st.exit_code == 0);
    const auto blob = read_bytes(dir / "st" / "model.safetensors");
    REQUIRE(blob.size() > 8);
    uint64_t header = 0;
    std::memcpy(&header, blob.data(), 8);
    const std::string json(blob.data() + 8, header);
    CHECK_THAT(json, Contains("\"sparse_arch.embedding_bag_collection.embedding_bags.t0.weight\":"
                              "{\"dtype\":\"F32\",\"shape\":[20000,16]"));
    // The table's bytes in both exports are the same.
    const std::string key =
        "embedding_bags.t0.weight\":{\"dtype\":\"F32\",\"shape\":[20000,16],"
        "\"data_offsets\":[";
    const size_t at = json.find(key) + key.size();
    const uint64_t begin = std::stoull(json.substr(at));
    CHECK(std::memcmp(blob.data() + 8 + header + begin, t0.data() + 128, 20000 * 16 * 4) == 0);

    // Flip one byte of a shard: info and train --resume name the file.
    const fs::path shard = ckpt / "tables" / "t3.0.0.weight.bin";
    REQUIRE(fs::exists(shard));
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(17);
        f.put('\x55');
    }
    const RunResult bad_info = run_shardrec({"ckpt", "info", ckpt.string()});
    CHECK(bad_info.exit_code != 0);
    CHECK_THAT(bad_info.output, Contains("tables/t3.0.0.weight.bin is corrupt"));
    auto args = train_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", ckpt.string()});
    const RunResult resumed = run_shardrec(args, kMpirun2);
    INFO(resumed.output);
    CHECK(resumed.exit_code != 0);
    CHECK_THAT(resumed.output, Contains("tables/t3.0.0.weight.bin is corrupt") &&
                                   Contains("CRC-32") && Contains("expected"));
}

TEST_CASE(
    "run directory e2e: a used --out is refused, --overwrite replaces it, --resume "
    "continues it",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("run_dir_reuse");
    const fs::path run = dir / "run";
    const RunResult first = run_shardrec(train_args(run, 4));
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    const auto metrics = read_bytes(run / "metrics.jsonl");
    const auto config = read_bytes(run / "config.yaml");

    const RunResult again = run_shardrec(train_args(run, 4, {"--set", "train.seed=99"}));
    INFO(again.output);
    CHECK(again.exit_code != 0);
    CHECK_THAT(again.output, Contains("already holds a run") && Contains("metrics.jsonl") &&
                                 Contains("1 checkpoint(s)") && Contains("--overwrite"));
    CHECK(read_bytes(run / "metrics.jsonl") == metrics);  // nothing touched
    CHECK(read_bytes(run / "config.yaml") == config);
    CHECK(fs::exists(run / "checkpoints" / "step-00000004"));

    // Resuming into its own directory continues it, with the same run id.
    auto resume = train_args(run, 8);
    resume.insert(resume.end(), {"--resume", (run / "checkpoints").string()});
    const RunResult resumed = run_shardrec(resume);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const std::string id = shardrec::train::checkpoint_run_id((run / "checkpoints").string());
    CHECK(!id.empty());
    CHECK(shardrec::train::read_manifest((run / "checkpoints" / "step-00000004").string()).run_id ==
          id);

    const RunResult overwritten =
        run_shardrec(train_args(run, 4, {"--overwrite", "--set", "train.seed=99"}));
    INFO(overwritten.output);
    REQUIRE(overwritten.exit_code == 0);
    CHECK_THAT(overwritten.output, Contains("removing the previous run's files"));
    CHECK(!fs::exists(run / "checkpoints" / "step-00000008"));
    CHECK(shardrec::train::checkpoint_run_id((run / "checkpoints").string()) != id);
    CHECK(numbers(run, 0).size() == 5);  // train 1..4 and eval 4: the old lines are gone

    // Resuming another run's checkpoint into this run's directory is refused too.
    const RunResult other = run_shardrec(train_args(dir / "other", 4));
    REQUIRE(other.exit_code == 0);
    auto foreign = train_args(run, 8);
    foreign.insert(foreign.end(), {"--resume", (dir / "other" / "checkpoints").string()});
    const RunResult mixed = run_shardrec(foreign);
    INFO(mixed.output);
    CHECK(mixed.exit_code != 0);
    CHECK_THAT(mixed.output, Contains("holds another run"));
    CHECK(numbers(run, 0).size() == 5);

    // A checkpoint_dir shared with another run is refused as well.
    const RunResult shared = run_shardrec(train_args(
        dir / "third", 4, {"--set", "train.checkpoint_dir=" + (run / "checkpoints").string()}));
    INFO(shared.output);
    CHECK(shared.exit_code != 0);
    CHECK_THAT(shared.output, Contains("train.checkpoint_dir '" + (run / "checkpoints").string() +
                                       "' already holds another run's checkpoints (") &&
                                  Contains("checkpoint(s)"));
}

TEST_CASE(
    "run directory e2e: a second run on a directory in use fails at once, naming the "
    "holder",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("run_dir_lock");
    const fs::path run = dir / "run";
    // A run that lasts (1e6 steps), in the background; killed at the end of the test.
    std::string cmd = std::string("'") + std::getenv("SHARDREC_BIN") + "'";
    for (const std::string& a : train_args(run, 1000000, {"--set", "train.checkpoint_every=0"}))
        cmd += " '" + a + "'";
    cmd += " > '" + (dir / "background.log").string() + "' 2>&1 & echo $!";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    int pid = 0;
    REQUIRE(std::fscanf(p, "%d", &pid) == 1);
    pclose(p);
    // Until it holds the lock and has started training.
    for (int i = 0; i < 600 && !fs::exists(run / "metrics.jsonl"); ++i)
        usleep(100 * 1000);
    const RunResult second = run_shardrec(train_args(run, 4, {"--overwrite"}));
    kill(pid, SIGKILL);
    INFO(second.output);
    CHECK(second.exit_code != 0);
    CHECK_THAT(second.output, Contains("is in use by another shardrec run") &&
                                  Contains("pid " + std::to_string(pid)));
    // The holder's files are untouched.
    CHECK(fs::exists(run / "metrics.jsonl"));
    // Once the holder is gone (however it ended), the lock is free.
    usleep(500 * 1000);
    const RunResult third = run_shardrec(train_args(run, 4, {"--overwrite"}));
    INFO(third.output);
    CHECK(third.exit_code == 0);
}

TEST_CASE(
    "checkpoint e2e: a resume with another global batch continues at the next unseen "
    "sample and says so",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_other_batch");
    const RunResult first = run_shardrec(train_args(dir / "first", 4), kMpirun2);  // global 32
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    auto args = train_args(dir / "resumed", 6);  // one rank: global 16
    args.insert(args.end(), {"--resume", (dir / "first" / "checkpoints").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Contains("with a global batch of 16 samples (the checkpoint's was "
                                        "32)") &&
                                   Contains("continues from sample 128"));
    const auto m = shardrec::train::read_manifest(
        (dir / "resumed" / "checkpoints" / "step-00000006").string());
    CHECK(m.samples == 128 + 2 * 16);
    CHECK(m.global_batch_size == 16);
}

TEST_CASE(
    "checkpoint e2e: --resume DIR and eval --checkpoint DIR skip a damaged newest checkpoint, "
    "saying which and why",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_fallback");
    const RunResult first = run_shardrec(train_args(dir / "first", 8));
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    const fs::path newest = dir / "first" / "checkpoints" / "step-00000008";
    {
        std::fstream f(newest / "tables" / "t0.0.0.weight.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('\x42');
    }
    auto args = train_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", (dir / "first" / "checkpoints").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Contains("skipping checkpoint " + newest.string()) &&
                                   Contains("t0.0.0.weight.bin is corrupt") &&
                                   Contains("step-00000004"));
    // Steps 5..8 were trained again from step 4: the same numbers as the first run's.
    CHECK(numbers(dir / "resumed", 5) == numbers(dir / "first", 5));
    // eval --checkpoint DIR takes the same one, and says so in its record.
    const RunResult eval =
        run_shardrec({"eval", (repo_root() / "configs" / "quickstart.yaml").string(),
                      "--checkpoint", (dir / "first" / "checkpoints").string(), "--set",
                      "train.eval_samples=256", "--set", "data.batch_size=16"});
    INFO(eval.output);
    REQUIRE(eval.exit_code == 0);
    CHECK_THAT(eval.output,
               Contains("skipping checkpoint " + newest.string()) && Contains("step-00000004\"}"));
    std::string step4_auc;  // the first run's own eval after step 4
    for (const auto& r : read_metrics(dir / "first")) {
        if (r.count("auc") != 0 && r.at("step") == "4")
            step4_auc = r.at("auc");
    }
    REQUIRE(!step4_auc.empty());
    CHECK_THAT(eval.output, Contains(R"("step":4,)") && Contains(R"("auc":)" + step4_auc + ","));
}

TEST_CASE(
    "checkpoint e2e: ckpt init, then train --resume from it, equals a straight run bitwise; "
    "train.steps 0 writes the same step 0",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_init");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult init = run_shardrec({"ckpt", "init", config, "--out", (dir / "init").string()});
    INFO(init.output);
    REQUIRE(init.exit_code == 0);
    const fs::path step0 = dir / "init" / "step-00000000";
    const auto m = shardrec::train::read_manifest(step0.string());
    CHECK(m.step == 0);
    CHECK(m.samples == 0);

    // train.steps 0 saves the initial weights: the same bytes as ckpt init.
    const RunResult zero = run_shardrec(train_args(dir / "zero", 0));
    INFO(zero.output);
    REQUIRE(zero.exit_code == 0);
    CHECK(crcs(dir / "zero" / "checkpoints" / "step-00000000") == crcs(step0));

    const RunResult straight = run_shardrec(train_args(dir / "straight", 8));
    INFO(straight.output);
    REQUIRE(straight.exit_code == 0);
    auto args = train_args(dir / "resumed", 8);
    args.insert(args.end(), {"--resume", (dir / "init").string()});
    const RunResult resumed = run_shardrec(args);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(numbers(dir / "resumed", 0) == numbers(dir / "straight", 0));
    CHECK(crcs(dir / "resumed" / "checkpoints" / "step-00000008") ==
          crcs(dir / "straight" / "checkpoints" / "step-00000008"));
}

TEST_CASE(
    "checkpoint e2e: export then ckpt import gives the same model bitwise; it trains and "
    "evaluates on two ranks; another shape is refused by name",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_import");
    const std::string config = (repo_root() / "configs" / "quickstart.yaml").string();
    const RunResult run = run_shardrec(train_args(dir / "run", 4), kMpirun2);
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const fs::path ckpt = dir / "run" / "checkpoints" / "step-00000004";
    const RunResult exported = run_shardrec({"ckpt", "export", ckpt.string(), "--format",
                                             "safetensors", "--out", (dir / "x").string()});
    INFO(exported.output);
    REQUIRE(exported.exit_code == 0);
    CHECK_THAT(exported.output, Contains("torchrec.models.dlrm.DLRM.load_state_dict"));
    const std::string st = (dir / "x" / "model.safetensors").string();
    const RunResult imported =
        run_shardrec({"ckpt", "import", st, config, "--out", (dir / "imported").string()});
    INFO(imported.output);
    REQUIRE(imported.exit_code == 0);
    // The model's bytes: every table (assembled from the 2-rank shards) and dense parameter.
    const RunResult again = run_shardrec({"ckpt", "export", (dir / "imported").string(), "--format",
                                          "safetensors", "--out", (dir / "y").string()});
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK(read_bytes(dir / "y" / "model.safetensors") == read_bytes(st));

    // It trains on and evaluates under another world size (fresh optimizer state).
    auto args = train_args(dir / "resumed", 6);
    args.insert(args.end(), {"--resume", (dir / "imported").string()});
    const RunResult resumed = run_shardrec(args, kMpirun2);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(numbers(dir / "resumed", 0).size() == 8);  // train 1..6, eval 4 and 6
    const RunResult eval =
        run_shardrec({"eval", config, "--checkpoint", (dir / "imported").string(), "--set",
                      "train.eval_samples=256", "--set", "data.batch_size=16"},
                     kMpirun2);
    INFO(eval.output);
    CHECK(eval.exit_code == 0);
    CHECK_THAT(eval.output, Contains("\"auc\":"));

    // Another model: the table and both shapes are named.
    const RunResult wrong =
        run_shardrec({"ckpt", "import", st, config, "--out", (dir / "wrong").string(), "--set",
                      "model.tables[2].num_embeddings=5001"});
    CHECK(wrong.exit_code != 0);
    CHECK_THAT(wrong.output, Contains("table 't2' is f32[5000, 16]") &&
                                 Contains("[5001, 16] f32 in this config"));
    CHECK(!fs::exists(dir / "wrong" / "step-00000000"));
}

TEST_CASE(
    "checkpoint e2e: --resume auto starts a run afresh, then continues it from its own "
    "newest checkpoint",
    "[e2e][checkpoint]") {
    const auto dir = fresh_dir("ckpt_resume_auto");
    auto args = train_args(dir / "run", 4);
    args.insert(args.end(), {"--resume", "auto"});
    const RunResult first = run_shardrec(args);
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    CHECK_THAT(first.output, Contains("--resume auto: no checkpoint in"));
    // The requeued job: the same command line with more steps.
    args = train_args(dir / "run", 8);
    args.insert(args.end(), {"--resume", "auto"});
    const RunResult again = run_shardrec(args);
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK_THAT(again.output, Contains("--resume auto: resuming from") &&
                                 Contains("loaded checkpoint") && Contains("step 4"));
    // The log marks where the run continued; the first attempt's config stays beside the new one.
    CHECK_THAT(read_file(dir / "run" / "metrics.jsonl"),
               Contains("{\"kind\":\"resume\",\"step\":4,\"checkpoint\":\"" +
                        (dir / "run" / "checkpoints").string() + "\"}"));
    CHECK_THAT(again.output, Contains("continues at step 4 with another config than its "
                                      "config.yaml (kept as config.before-step-4.yaml):\n"
                                      "  steps: 4 -> steps: 8"));
    CHECK_THAT(read_file(dir / "run" / "config.before-step-4.yaml"), Contains("steps: 4"));
    // A resume that fails (the config of another model) leaves the run's config.yaml, which
    // predict and serve read, as it was.
    const std::string config = read_file(dir / "run" / "config.yaml");
    REQUIRE_THAT(config, Contains("steps: 8"));
    args = train_args(dir / "run", 12, {"--set", "model.tables[2].num_embeddings=5001"});
    args.insert(args.end(), {"--resume", "auto"});
    const RunResult other = run_shardrec(args);
    CHECK(other.exit_code != 0);
    CHECK_THAT(other.output, Contains("table 't2'"));
    CHECK(read_file(dir / "run" / "config.yaml") == config);
    // The same numbers as 8 steps straight.
    const RunResult straight = run_shardrec(train_args(dir / "straight", 8));
    REQUIRE(straight.exit_code == 0);
    CHECK(numbers(dir / "run", 5) == numbers(dir / "straight", 5));
    // --overwrite removes the kept config with the rest of the run.
    const RunResult replaced = run_shardrec(train_args(dir / "run", 4, {"--overwrite"}));
    REQUIRE(replaced.exit_code == 0);
    CHECK(!fs::exists(dir / "run" / "config.before-step-4.yaml"));
    // Without --out it has nothing to continue.
    const RunResult no_out = run_shardrec(
        {"train", (repo_root() / "configs" / "quickstart.yaml").string(), "--resume", "auto"});
    CHECK(no_out.exit_code != 0);
    CHECK_THAT(no_out.output, Contains("--resume auto needs --out"));
}

TEST_CASE(
    "checkpoint e2e: --resume auto starts a run that saved no checkpoint again from step 0, "
    "under its own id",
    "[e2e][checkpoint]") {
    // A job killed before its first checkpoint, then requeued: the same command line.
    const auto dir = fresh_dir("ckpt_resume_auto_restart");
    auto args = train_args(dir / "run", 4, {"--set", "train.checkpoint_every=0"});
    args.insert(args.end(), {"--resume", "auto"});
    const RunResult first = run_shardrec(args);
    REQUIRE(first.exit_code == 0);
    const std::string run_id = read_file(dir / "run" / "run.yaml");
    const RunResult again = run_shardrec(args);
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK_THAT(again.output, Contains("holds this run's records (config.yaml, metrics.jsonl, "
                                      "run.yaml) but no checkpoint: it starts again from step 0"));
    CHECK(read_file(dir / "run" / "run.yaml") == run_id);
    const std::string metrics = read_file(dir / "run" / "metrics.jsonl");
    CHECK_THAT(metrics, Contains("{\"kind\":\"resume\",\"step\":0,\"checkpoint\":\"\"}"));
    CHECK(!fs::exists(dir / "run" / "config.before-step-0.yaml"));  // the same config
    // Without --resume auto the directory stays refused.
    const RunResult fresh = run_shardrec(train_args(dir / "run", 4));
    CHECK(fresh.exit_code != 0);
    CHECK_THAT(fresh.output, Contains("already holds a run"));
    // A directory with checkpoints of its run is resumed, not restarted.
    const RunResult saved =
        run_shardrec(train_args(dir / "saved", 4, {"--set", "train.checkpoint_every=2"}));
    REQUIRE(saved.exit_code == 0);
    auto resumed = train_args(dir / "saved", 6, {"--set", "train.checkpoint_every=2"});
    resumed.insert(resumed.end(), {"--resume", "auto"});
    const RunResult later = run_shardrec(resumed);
    REQUIRE(later.exit_code == 0);
    CHECK_THAT(later.output, Contains("--resume auto: resuming from"));
}
