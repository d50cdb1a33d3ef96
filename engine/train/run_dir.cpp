#include "engine/train/run_dir.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "engine/core/error.h"

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

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
    const std::filesystem::path tmp = path.string() + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    SR_CHECK(f != nullptr, "cannot create '{}': {}", tmp.string(), std::strerror(errno));
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    SR_CHECK(written && closed, "cannot write '{}': {}", tmp.string(), std::strerror(errno));
    std::filesystem::rename(tmp, path);
}

}  // namespace

std::string default_run_dir(const std::string& parent) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
    const std::filesystem::path base = std::filesystem::path(parent) / stamp;
    std::filesystem::path dir = base;
    for (int n = 2; std::filesystem::exists(dir); ++n) {
        dir = base.string() + fmt::format("-{}", n);
    }
    return dir.string();
}

std::string create_run_dir(const std::string& dir, const Config& config) {
    std::string chosen;
    if (comm::process_info().rank == 0) {
        chosen = dir.empty() ? default_run_dir() : dir;
        std::error_code ec;
        std::filesystem::create_directories(chosen, ec);
        SR_CHECK(!ec, "cannot create the run directory '{}': {}", chosen, ec.message());
        write_file_atomically(std::filesystem::path(chosen) / "config.yaml", dump_config(config));
    }
    return broadcast_from_rank0(chosen);
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

void MetricsWriter::write_line(const std::string& line) {
    if (!file_) {
        return;
    }
    const bool ok = std::fputs(line.c_str(), file_.get()) >= 0 &&
                    std::fputc('\n', file_.get()) != EOF && std::fflush(file_.get()) == 0;
    SR_CHECK(ok, "cannot write '{}': {}", path_, std::strerror(errno));
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
