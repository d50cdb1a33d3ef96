// Training progress on rank 0: a bar redrawn in place when stderr is a terminal (at most ten times
// a second), and a log line every `log_every` steps otherwise (files, CI, SLURM logs).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace shardrec::train {

class Progress {
public:
    enum class Mode { kOff, kBar, kLines };

    // Rank 0 gets a bar when stderr is a terminal, lines otherwise; other ranks get kOff.
    Progress(int64_t total_steps, int64_t log_every);
    Progress(int64_t total_steps, int64_t log_every, Mode mode);
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;
    Progress(Progress&&) = delete;
    Progress& operator=(Progress&&) = delete;
    ~Progress();  // finish()

    // `step` steps are done; `loss` is the latest training loss.
    void update(int64_t step, double loss, double samples_per_s);
    // An info line (an eval result, say) that does not tear the bar: the bar is cleared, the
    // line logged on rank 0, and the bar drawn again.
    void message(const std::string& text);
    // Ends the bar's line. Idempotent.
    void finish();

    Mode mode() const { return mode_; }

private:
    void draw();

    int64_t total_steps_;
    int64_t log_every_;
    Mode mode_;
    int64_t step_ = 0;
    double loss_ = 0;
    double samples_per_s_ = 0;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

// "  120/600 [#####...............]  20%  45.1k samples/s  loss 0.69315" (`width` bar cells).
std::string format_progress_bar(
    int64_t step, int64_t total, double loss, double samples_per_s, int width);
// "step 120/600  loss 0.69315  45123 samples/s" (the log line form). A NaN loss is left out
// (an inference run: `shardrec predict`).
std::string format_progress_line(int64_t step, int64_t total, double loss, double samples_per_s);

}  // namespace shardrec::train
