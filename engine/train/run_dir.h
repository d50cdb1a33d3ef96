// The run directory of `shardrec train` and the metrics log in it. Only rank 0 creates files:
// config.yaml (the resolved config) and metrics.jsonl (one JSON object per line, flushed per line).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/modules/cached_embedding_shard.h"
#include "engine/train/metrics.h"

namespace shardrec::train {

// "<parent>/<YYYYmmdd-HHMMSS>" in local time; "-2", "-3", ... is appended while the name exists.
std::string default_run_dir(const std::string& parent = "runs");

// How a run may use a directory that already holds files.
struct RunDirOptions {
    // --resume: the checkpoint (or directory of them) the run continues from; "" starts afresh.
    std::string resume;
    // --overwrite: a directory holding another run's files is emptied of them (config.yaml,
    // run.yaml, metrics.jsonl, the checkpoints) instead of refused.
    bool overwrite = false;
    // --resume auto found no checkpoint: the directory's own run, which saved none (killed before
    // its first), starts again from step 0 under its run id; a directory holding checkpoints is
    // refused as for a fresh start.
    bool restart = false;
};

// The directory of one run, held by this process for the run's life. Rank 0 holds an exclusive
// lock on <dir>/.lock (and on the checkpoint directory's, when that lies elsewhere), so a second
// run on the same directory fails at once, naming the holder. Every run has an id (run.yaml):
// its checkpoints carry it, and pruning only ever removes checkpoints of the same id. A resumed
// run takes the id of the checkpoint it continues.
class RunDir {
public:
    RunDir() = default;
    RunDir(RunDir&& other) noexcept;
    RunDir& operator=(RunDir&& other) noexcept;
    RunDir(const RunDir&) = delete;
    RunDir& operator=(const RunDir&) = delete;
    ~RunDir();  // releases the locks

    const std::string& path() const { return path_; }

    const std::string& checkpoint_dir() const { return checkpoint_dir_; }

    const std::string& run_id() const { return run_id_; }

    // Whether the directory already held this run's records (a resume, or a restart): the run
    // then marks where it continues in metrics.jsonl (MetricsWriter::resume).
    bool continued() const { return continued_; }

    // A continued run's config.yaml, written once its checkpoint (of step `step`) has loaded
    // (rank 0; nothing to do for a fresh start, written by open_run_dir): a resume that fails (a
    // checkpoint of another model) leaves the run's own config.yaml, which predict and serve
    // read, as it was. A config that differs from the one there keeps the earlier one as
    // config.before-step-<step>.yaml, and the changed lines are logged.
    void write_config(int64_t step) const;

private:
    friend RunDir open_run_dir(const std::string&, const Config&, const RunDirOptions&);
    void release();

    std::string path_;
    std::string checkpoint_dir_;  // train.checkpoint_dir, or <path>/checkpoints
    std::string run_id_;
    std::string resumed_config_;  // rank 0, a continued run's: config.yaml's text to write
    bool continued_ = false;
    std::vector<int> lock_fds_;  // rank 0 only
};

// Rank 0 creates `dir` (with its parents; default_run_dir() when empty), takes the locks, checks
// that the run directory and the checkpoint directory hold no other run's files (a run that does
// not resume refuses them, unless options.overwrite), and writes run.yaml and config.yaml
// (dump_config) atomically; a resumed run's config.yaml waits for RunDir::write_config. The path
// and run id are broadcast, so every rank returns the same. Collective when the world size is > 1;
// a refusal fails every rank.
RunDir open_run_dir(const std::string& dir, const Config& config, const RunDirOptions& options);

// A new run id: "<YYYYmmdd-HHMMSS>-<host>-<pid>-<random hex>".
std::string new_run_id();

// The run id in <dir>/run.yaml; "" when there is none.
std::string read_run_id(const std::string& dir);

// Appends metrics to <run_dir>/metrics.jsonl, one object per line:
//   {"kind":"train","step":N,"loss":L,"lr":X,"samples_per_s":Y,"loader_wait_ms":W}
//   {"kind":"eval","step":N,"loss":L,"auc":A,"ne":E,"accuracy":C,"calibration":K,"count":S}
//   {"kind":"target_reached","step":N,"auc":A,"target_auc":T}   (train.target_auc ends the run)
//   {"kind":"done","steps":N,"samples":M,"wall_s":T}
//   {"kind":"resume","step":N,"checkpoint":"DIR"}   (a continued run, before its first record;
//       records of steps after N written before it belong to an attempt that did not last)
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
    // A key_value table's cache over the steps since its last record, summed over the ranks.
    void cache(int64_t step, const std::string& table, const CacheStats& window);
    // A managed-collision table at an eviction pass: slots held, evictions and admissions over
    // the eviction interval, and the fraction of the interval's ids that found their own slot.
    void managed_collision(int64_t step,
                           const std::string& table,
                           int64_t occupancy,
                           int64_t slots,
                           int64_t evictions,
                           int64_t admissions,
                           double hit_fraction);
    void done(int64_t steps, int64_t samples, double wall_s);
    // A continued run starts at step N, from `checkpoint` ("" for a restart from step 0).
    void resume(int64_t step, const std::string& checkpoint);

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
