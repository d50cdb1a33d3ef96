#include "engine/train/run_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "engine/core/durable_file.h"
#include "engine/core/error.h"
#include "engine/core/json_text.h"
#include "engine/core/log.h"
#include "engine/train/checkpoint.h"

namespace shardrec::train {
namespace {

// Rank 0's string on every rank. Raw MPI because this runs before any ProcessGroup exists.
std::string broadcast_from_rank0(std::string text) {
    if (comm::process_info().world_size <= 1) {
        return text;
    }
    int64_t size = static_cast<int64_t>(text.size());
    SR_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
    text.resize(static_cast<size_t>(size));
    SR_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD));
    return text;
}

namespace fs = std::filesystem;

std::string timestamp(const char* format) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[64];
    std::strftime(text, sizeof(text), format, &local);
    return text;
}

// Takes an exclusive lock on <dir>/.lock for the life of the process (flock: released when the
// process ends, however it ends) and writes the holder into it. Returns the descriptor.
int lock_directory(const fs::path& dir, const std::string& what) {
    const fs::path path = dir / ".lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SR_CHECK(fd >= 0, "cannot create the lock file '{}' of the {}: {}", path.string(), what,
             std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[256] = {};
        const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
        ::close(fd);
        std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
        while (!who.empty() && (who.back() == '\n' || who.back() == ' '))
            who.pop_back();
        SR_CHECK(err != EWOULDBLOCK,
                 "the {} '{}' is in use by another shardrec run ({}): wait for it to end or "
                 "choose another directory",
                 what, dir.string(), who.empty() ? "holder unknown" : who);
        SR_CHECK(false, "cannot lock '{}': {}", path.string(), std::strerror(err));
    }
    const std::string me = fmt::format("pid {} on {} since {}\n", ::getpid(),
                                       comm::process_info().host, timestamp("%Y-%m-%d %H:%M:%S"));
    const bool ok = ::ftruncate(fd, 0) == 0 &&
                    ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
    if (!ok) {
        const int err = errno;
        ::close(fd);
        SR_CHECK(false, "cannot write the lock file '{}': {}", path.string(), std::strerror(err));
    }
    return fd;
}

bool is_checkpoint_entry(const std::string& name) {
    for (const char* prefix : {"step-", ".tmp-step-", ".old-step-"}) {
        if (name.rfind(prefix, 0) == 0)
            return true;
    }
    return false;
}

std::string trimmed(const std::string& line) {
    const size_t first = line.find_first_not_of(' ');
    return first == std::string::npos ? "" : line.substr(first);
}

// The files of a run found in its directories, by name.
std::vector<fs::path> run_files(const fs::path& dir, const fs::path& checkpoint_dir) {
    std::vector<fs::path> found;
    for (const char* name : {"config.yaml", "run.yaml", "metrics.jsonl"}) {
        if (fs::exists(dir / name))
            found.push_back(dir / name);
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {  // RunDir::write_config's
        const std::string name = entry.path().filename().string();
        if (name.rfind("config.before-step-", 0) == 0)
            found.push_back(entry.path());
    }
    for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
        if (is_checkpoint_entry(entry.path().filename().string()))
            found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    return found;
}

std::string describe(const std::vector<fs::path>& found) {
    std::string names;
    int checkpoints = 0;
    for (const fs::path& p : found) {
        if (is_checkpoint_entry(p.filename().string())) {
            ++checkpoints;
        } else {
            names += (names.empty() ? "" : ", ") + p.filename().string();
        }
    }
    if (checkpoints > 0)
        names += fmt::format("{}{} checkpoint(s) in {}", names.empty() ? "" : ", ", checkpoints,
                             found.back().parent_path().string());
    return names;
}

// Whether a resumed run of id `resumed_id` would meet another run's files: run.yaml of another
// id, or a checkpoint of another id (unknown ids, "", are taken as the same run).
bool holds_other_run(const std::vector<fs::path>& found,
                     const std::string& held_id,
                     const std::string& resumed_id) {
    if (resumed_id.empty())
        return false;
    if (!held_id.empty() && held_id != resumed_id)
        return true;
    for (const fs::path& p : found) {
        if (p.filename().string().rfind("step-", 0) == 0) {
            const std::string id = checkpoint_run_id(p.string());
            if (!id.empty() && id != resumed_id)
                return true;
        }
    }
    return false;
}

bool same_path(const fs::path& a, const fs::path& b) {
    std::error_code ec;
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace

std::string read_run_id(const std::string& dir) {
    std::ifstream in(fs::path(dir) / "run.yaml");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("run_id:", 0) == 0) {
            const size_t b = line.find_first_not_of(' ', 7);
            return b == std::string::npos ? "" : line.substr(b);
        }
    }
    return "";
}

std::string new_run_id() {
    std::random_device rd;
    return fmt::format("{}-{}-{}-{:08x}", timestamp("%Y%m%d-%H%M%S"), comm::process_info().host,
                       ::getpid(), rd());
}

std::string default_run_dir(const std::string& parent) {
    const fs::path base = fs::path(parent) / timestamp("%Y%m%d-%H%M%S");
    fs::path dir = base;
    for (int n = 2; fs::exists(dir); ++n) {
        dir = base.string() + fmt::format("-{}", n);
    }
    return dir.string();
}

RunDir::RunDir(RunDir&& other) noexcept
    : path_(std::move(other.path_)),
      checkpoint_dir_(std::move(other.checkpoint_dir_)),
      run_id_(std::move(other.run_id_)),
      resumed_config_(std::move(other.resumed_config_)),
      lock_fds_(std::exchange(other.lock_fds_, {})) {}

RunDir& RunDir::operator=(RunDir&& other) noexcept {
    if (this != &other) {
        release();
        path_ = std::move(other.path_);
        checkpoint_dir_ = std::move(other.checkpoint_dir_);
        run_id_ = std::move(other.run_id_);
        resumed_config_ = std::move(other.resumed_config_);
        lock_fds_ = std::exchange(other.lock_fds_, {});
    }
    return *this;
}

RunDir::~RunDir() {
    release();
}

void RunDir::release() {
    for (const int fd : lock_fds_)
        ::close(fd);  // closing the last descriptor releases the flock
    lock_fds_.clear();
}

void RunDir::write_config(int64_t step) const {
    if (resumed_config_.empty())
        return;
    const fs::path config = fs::path(path_) / "config.yaml";
    std::ifstream in(config, std::ios::binary);
    const std::string before((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    if (in.is_open() && !before.empty() && before != resumed_config_) {
        // The resolved configs list the same keys in the same order: the changed lines say what.
        std::istringstream a(before), b(resumed_config_);
        std::string old_line, new_line, changes;
        int shown = 0;
        while (std::getline(a, old_line) && std::getline(b, new_line)) {
            if (old_line != new_line && old_line.rfind('#', 0) != 0 && shown++ < 6)
                changes += fmt::format("\n  {} -> {}", trimmed(old_line), trimmed(new_line));
        }
        const std::string kept = fmt::format("config.before-step-{}.yaml", step);
        write_file_atomically((fs::path(path_) / kept).string(), before);
        log::root().warn(
            "the run continues at step {} with another config than its config.yaml "
            "(kept as {}){}",
            step, kept, changes.empty() ? "" : ":" + changes);
    }
    write_file_atomically(config.string(), resumed_config_);
}

RunDir open_run_dir(const std::string& dir, const Config& config, const RunDirOptions& options) {
    RunDir run;
    std::string chosen, run_id;
    if (comm::process_info().rank == 0) {
        chosen = dir.empty() ? default_run_dir() : dir;
        const fs::path path(chosen);
        std::error_code ec;
        fs::create_directories(path, ec);
        SR_CHECK(!ec && fs::is_directory(path), "cannot create the run directory '{}': {}", chosen,
                 ec ? ec.message() : "a file of that name exists");
        const fs::path checkpoint_dir = config.train.checkpoint_dir.empty()
                                            ? path / "checkpoints"
                                            : fs::path(config.train.checkpoint_dir);
        run.lock_fds_.push_back(lock_directory(path, "run directory"));
        if (!same_path(checkpoint_dir, path / "checkpoints") && !same_path(checkpoint_dir, path)) {
            fs::create_directories(checkpoint_dir, ec);
            SR_CHECK(!ec, "cannot create train.checkpoint_dir '{}': {}", checkpoint_dir.string(),
                     ec.message());
            run.lock_fds_.push_back(lock_directory(checkpoint_dir, "checkpoint directory"));
        }
        const std::vector<fs::path> found = run_files(path, checkpoint_dir);
        const std::string held_id = read_run_id(path);
        const std::string resumed_id =
            options.resume.empty() ? "" : checkpoint_run_id(options.resume);
        // A directory holds a run once that run trained (metrics.jsonl or a checkpoint): a start
        // that failed before its first step (a bad data path) leaves only config.yaml and run.yaml,
        // which the next start replaces. A resumed run continues its own directory; any other use
        // of a used directory would mix two runs' metrics and let one prune the other's
        // checkpoints.
        const bool trained = std::any_of(found.begin(), found.end(), [](const fs::path& p) {
            return p.filename() != "config.yaml" && p.filename() != "run.yaml";
        });
        const bool has_checkpoints = std::any_of(found.begin(), found.end(), [](const fs::path& p) {
            return is_checkpoint_entry(p.filename().string());
        });
        const bool restart = options.restart && options.resume.empty() && !has_checkpoints;
        const bool other_run =
            trained && !restart &&
            (options.resume.empty() || holds_other_run(found, held_id, resumed_id));
        if (other_run && options.overwrite) {
            log::root().warn("--overwrite: removing the previous run's files: {}", describe(found));
            for (const fs::path& p : found)
                fs::remove_all(p);
        } else if (other_run && options.resume.empty()) {
            // Only train.checkpoint_dir, shared with another run, holds its checkpoints: name it.
            const bool separate = !same_path(checkpoint_dir, path / "checkpoints") &&
                                  !same_path(checkpoint_dir, path);
            const bool only_checkpoints =
                std::all_of(found.begin(), found.end(), [](const fs::path& p) {
                    const std::string name = p.filename().string();
                    return is_checkpoint_entry(name) || name == "config.yaml" || name == "run.yaml";
                });
            const bool own_dir = !separate || !only_checkpoints;
            SR_CHECK(own_dir,
                     "train.checkpoint_dir '{}' already holds another run's checkpoints ({}): give "
                     "this run its own train.checkpoint_dir, or continue that run with --resume",
                     checkpoint_dir.string(), describe(found));
            SR_CHECK(false,
                     "the run directory '{}' already holds a run ({}): choose a fresh --out, "
                     "continue that run with --resume, or replace it with --overwrite",
                     chosen, describe(found));
        } else if (other_run) {
            SR_CHECK(false,
                     "the run directory '{}' holds another run ({}) than the checkpoint {} (run "
                     "{}): resume it into its own run directory or a fresh --out (or --overwrite)",
                     chosen, describe(found), options.resume, resumed_id);
        }
        const bool continued = trained && (!options.resume.empty() || restart);
        if (restart && continued)
            log::root().warn(
                "--resume auto: '{}' holds this run's records ({}) but no checkpoint: "
                "it starts again from step 0",
                chosen, describe(found));
        run_id = !resumed_id.empty()             ? resumed_id
                 : continued && !held_id.empty() ? held_id
                                                 : new_run_id();
        write_file_atomically((path / "run.yaml").string(), fmt::format("run_id: {}\n", run_id));
        if (continued)
            run.resumed_config_ = dump_config(config);
        else
            write_file_atomically((path / "config.yaml").string(), dump_config(config));
        run.continued_ = continued;
        run.checkpoint_dir_ = checkpoint_dir.string();
    }
    run.path_ = broadcast_from_rank0(chosen);
    run.run_id_ = broadcast_from_rank0(run_id);
    run.checkpoint_dir_ = broadcast_from_rank0(run.checkpoint_dir_);
    run.continued_ = broadcast_from_rank0(run.continued_ ? "1" : "") == "1";
    return run;
}

// ---- metrics.jsonl ----

std::string json_number(double value) {
    return std::isfinite(value) ? fmt::format("{:.9g}", value) : std::string("null");
}

MetricsWriter::MetricsWriter(const std::string& run_dir)
    : MetricsWriter(run_dir, comm::process_info().rank == 0) {}

MetricsWriter::MetricsWriter(const std::string& run_dir, bool enabled)
    : path_((std::filesystem::path(run_dir) / "metrics.jsonl").string()) {
    if (!enabled) {
        return;
    }
    // Append: a resumed run continues the same log.
    file_.reset(std::fopen(path_.c_str(), "a"));
    SR_CHECK(file_ != nullptr, "cannot open '{}': {}", path_, std::strerror(errno));
}

void MetricsWriter::resume(int64_t step, const std::string& checkpoint) {
    write_line(fmt::format(R"({{"kind":"resume","step":{},"checkpoint":{}}})", step,
                           json_quote(checkpoint)));
}

void MetricsWriter::write_line(const std::string& line) {
    if (!file_) {
        return;
    }
    const bool ok = std::fputs(line.c_str(), file_.get()) >= 0 &&
                    std::fputc('\n', file_.get()) != EOF && std::fflush(file_.get()) == 0;
    SR_CHECK(ok, "cannot write '{}': {}", path_, std::strerror(errno));
}

void MetricsWriter::cache(int64_t step, const std::string& table, const CacheStats& w) {
    if (!file_) {
        return;
    }
    write_line(fmt::format(
        R"({{"kind":"cache","step":{},"table":"{}","hit_rate":{},"unique_rows":{},"misses":{},)"
        R"("overflow":{},"bytes_in":{},"bytes_out":{}}})",
        step, table, json_number(w.hit_rate()), w.unique_rows, w.misses, w.overflow, w.bytes_in,
        w.bytes_out));
}

void MetricsWriter::managed_collision(int64_t step,
                                      const std::string& table,
                                      int64_t occupancy,
                                      int64_t slots,
                                      int64_t evictions,
                                      int64_t admissions,
                                      double hit_fraction) {
    if (!file_) {
        return;
    }
    write_line(fmt::format(
        R"({{"kind":"managed_collision","step":{},"table":"{}","occupancy":{},"slots":{},)"
        R"("evictions":{},"admissions":{},"hit_fraction":{}}})",
        step, table, occupancy, slots, evictions, admissions, json_number(hit_fraction)));
}

void MetricsWriter::train(
    int64_t step, double loss, double lr, double samples_per_s, double loader_wait_ms) {
    if (!file_) {
        return;
    }
    const std::string wait =
        loader_wait_ms >= 0 ? fmt::format(R"(,"loader_wait_ms":{})", json_number(loader_wait_ms))
                            : "";
    write_line(fmt::format(R"({{"kind":"train","step":{},"loss":{},"lr":{},"samples_per_s":{}{}}})",
                           step, json_number(loss), json_number(lr), json_number(samples_per_s),
                           wait));
}

void MetricsWriter::eval(int64_t step, const Metrics& m) {
    if (!file_) {
        return;
    }
    write_line(fmt::format(
        R"({{"kind":"eval","step":{},"loss":{},"auc":{},"ne":{},"accuracy":{},"calibration":{},)"
        R"("count":{}}})",
        step, json_number(m.loss), json_number(m.auc), json_number(m.ne), json_number(m.accuracy),
        json_number(m.calibration), m.count));
}

void MetricsWriter::target_reached(int64_t step, double auc, double target_auc) {
    if (!file_) {
        return;
    }
    write_line(fmt::format(R"({{"kind":"target_reached","step":{},"auc":{},"target_auc":{}}})",
                           step, json_number(auc), json_number(target_auc)));
}

void MetricsWriter::done(int64_t steps, int64_t samples, double wall_s) {
    if (!file_) {
        return;
    }
    write_line(fmt::format(R"({{"kind":"done","steps":{},"samples":{},"wall_s":{}}})", steps,
                           samples, json_number(wall_s)));
}

}  // namespace shardrec::train
