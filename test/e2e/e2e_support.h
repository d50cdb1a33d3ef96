// Helpers for end-to-end tests: run the real `shardrec` binary (SHARDREC_BIN, set by ctest) on
// real files in a fresh temporary directory, and read the metrics.jsonl it writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace shardrec::test {

std::filesystem::path repo_root();
std::filesystem::path fresh_dir(const std::string& name);  // under the system temp directory

struct RunResult {
    int exit_code = 0;
    std::string output;  // stdout and stderr together
};

// `train` of configs/quickstart.yaml into `run` for `steps` steps of batch 32, a loss line each,
// one batch at a time (train.pipeline base: a fault at step S follows exactly S - 1 steps),
// evaluating 256 samples after the last; `sets` are further KEY=VALUE overrides.
std::vector<std::string> small_train_args(const std::filesystem::path& run,
                                          int64_t steps,
                                          const std::vector<std::string>& sets = {});

// Runs `prefix shardrec args...` (prefix: e.g. "mpirun -np 2 ..." or empty).
RunResult run_shardrec(const std::vector<std::string>& args, const std::string& prefix = "");

// The bytes of a file (empty when it cannot be read).
std::string read_file(const std::filesystem::path& path);

// Column `col` (0-based) of each line of a CSV after its header.
std::vector<std::string> csv_column(const std::filesystem::path& path, int col);

// One metrics.jsonl line as key -> raw value text (numbers unparsed, strings unquoted).
using JsonRecord = std::map<std::string, std::string>;
std::vector<JsonRecord> read_metrics(const std::filesystem::path& run_dir);

}  // namespace shardrec::test
