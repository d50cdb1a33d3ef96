#include "test/e2e/e2e_support.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace shardrec::test {

std::filesystem::path repo_root() {
    return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

std::filesystem::path fresh_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("shardrec_e2e_" + name + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> csv_column(const std::filesystem::path& path, int col) {
    std::istringstream in(read_file(path));
    std::string line;
    std::getline(in, line);
    std::vector<std::string> out;
    while (std::getline(in, line)) {
        for (int i = 0; i < col; ++i)
            line = line.substr(line.find(',') + 1);
        out.push_back(line.substr(0, line.find(',')));
    }
    return out;
}

std::vector<std::string> small_train_args(const std::filesystem::path& run,
                                          int64_t steps,
                                          const std::vector<std::string>& sets) {
    // Absolute: some tests run the binary from a directory of their own.
    const auto config = std::filesystem::absolute(repo_root() / "configs" / "quickstart.yaml");
    std::vector<std::string> args = {"train", config.string(),
                                     "--out", run.string(),
                                     "--set", "train.steps=" + std::to_string(steps),
                                     "--set", "train.log_every=1",
                                     "--set", "train.eval_every=0",
                                     "--set", "train.eval_samples=256",
                                     "--set", "data.batch_size=32",
                                     "--set", "train.pipeline=base"};
    for (const auto& s : sets) {
        args.push_back("--set");
        args.push_back(s);
    }
    return args;
}

RunResult run_shardrec(const std::vector<std::string>& args, const std::string& prefix) {
    const char* bin = std::getenv("SHARDREC_BIN");
    SR_CHECK(bin != nullptr, "SHARDREC_BIN is not set (run the e2e tests through ctest)");
    std::string cmd = prefix.empty() ? "" : prefix + " ";
    cmd += std::string("'") + bin + "'";
    for (const auto& a : args)
        cmd += " '" + a + "'";
    cmd += " 2>&1";
    RunResult r;
    FILE* p = popen(cmd.c_str(), "r");
    SR_CHECK(p != nullptr, "cannot run {}", cmd);
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
        r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

std::vector<JsonRecord> read_metrics(const std::filesystem::path& run_dir) {
    std::vector<JsonRecord> out;
    std::ifstream in(run_dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        // Flat objects of numbers and plain strings: {"k":v,"k2":"s"}.
        JsonRecord rec;
        size_t i = line.find('{');
        while (i != std::string::npos && i < line.size()) {
            const size_t k0 = line.find('"', i);
            if (k0 == std::string::npos)
                break;
            const size_t k1 = line.find('"', k0 + 1);
            const size_t colon = line.find(':', k1);
            size_t v0 = colon + 1;
            size_t v1 = line.find_first_of(",}", v0);
            std::string value = line.substr(v0, v1 - v0);
            if (!value.empty() && value.front() == '"')
                value = value.substr(1, value.size() - 2);
            rec[line.substr(k0 + 1, k1 - k0 - 1)] = value;
            i = v1 + 1;
        }
        out.push_back(rec);
    }
    return out;
}

}  // namespace shardrec::test
