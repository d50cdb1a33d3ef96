// The run directory of `shardrec train` and the metrics log in it. Only rank 0 creates files:
// config.yaml (the resolved config) and metrics.jsonl (one JSON object per line, flushed per line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/config/config.h"
#include "engine/train/metrics.h"

namespace shardrec::train {

// "<parent>/<YYYYmmdd-HHMMSS>" in local time; "-2", "-3", ... is appended while the name exists.
std::string default_run_dir(const std::string& parent = "runs");

// Rank 0 creates `dir` (with its parents; default_run_dir() when empty) and writes
// dir/config.yaml (dump_config, written to a temporary file then renamed). The chosen path is
// broadcast, so every rank returns the same directory. Collective when the world size is > 1.
std::string create_run_dir(const std::string& dir, const Config& config);

// Appends metrics to <run_dir>/metrics.jsonl, one object per line:
//   {"kind":"train","step":N,"loss":L,"lr":X,"samples_per_s":Y,"loader_wait_ms":W}
//   {"kind":"eval","step":N,"loss":L,"auc":A,"ne":E,"accuracy":C,"calibration":K,"count":S}
//   {"kind":"target_reached","step":N,"auc":A,"target_auc":T}   (train.target_auc ends the run)
//   {"kind":"done","steps":N,"samples":M,"wall_s":T}
// Floats use %.9g; NaN and infinities are written as null (JSON has no literal for them).
// Each line is flushed, so a crashed run keeps every line written before the crash.
// Disabled (every call a no-op, no file) on ranks other than 0.
class MetricsWriter {
public:
    explicit MetricsWriter(const std::string& run_dir);  // enabled on rank 0 only
    MetricsWriter(const std::string& run_dir, bool enabled);
    MetricsWriter(MetricsWriter&&) noexcept = default;
    MetricsWriter& operator=(MetricsWriter&&) noexcept = default;
    MetricsWriter(const MetricsWriter&) = delete;
    MetricsWriter& operator=(const MetricsWriter&) = delete;
    ~MetricsWriter() = default;

    // loader_wait_ms (the mean time a step waited for its batch) is written when >= 0.
    void train(
        int64_t step, double loss, double lr, double samples_per_s, double loader_wait_ms = -1);
    void eval(int64_t step, const Metrics& m);
    void target_reached(int64_t step, double auc, double target_auc);
    void done(int64_t steps, int64_t samples, double wall_s);

    bool enabled() const { return file_ != nullptr; }

    const std::string& path() const { return path_; }

private:
    struct FileCloser {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };

    void write_line(const std::string& line);

    std::string path_;
    std::unique_ptr<std::FILE, FileCloser> file_;
};

// A float as JSON: %.9g, or null when not finite.
std::string json_number(double value);

}  // namespace shardrec::train
