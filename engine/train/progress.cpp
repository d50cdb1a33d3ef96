#include "engine/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "comm/mpi_env.h"
#include "engine/core/log.h"

namespace shardrec::train {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;

// 45123 -> "45.1k", 2.1e6 -> "2.10M": three significant digits fit the bar's fixed width.
std::string short_rate(double x) {
    if (x >= 1e6) {
        return fmt::format("{:.2f}M", x / 1e6);
    }
    if (x >= 1e3) {
        return fmt::format("{:.1f}k", x / 1e3);
    }
    return fmt::format("{:.0f}", x);
}

Progress::Mode default_mode() {
    if (comm::process_info().rank != 0) {
        return Progress::Mode::kOff;
    }
    return isatty(STDERR_FILENO) ? Progress::Mode::kBar : Progress::Mode::kLines;
}

}  // namespace

std::string format_progress_bar(
    int64_t step, int64_t total, double loss, double samples_per_s, int width) {
    const double frac =
        total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0)
                  : 0.0;
    const int filled = static_cast<int>(frac * width);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') +
                            std::string(static_cast<size_t>(width - filled), '.');
    const int digits = static_cast<int>(std::to_string(total).size());
    // No loss (NaN): an inference run's bar.
    const std::string tail = std::isnan(loss) ? "" : fmt::format("  loss {:.5f}", loss);
    return fmt::format("{:>{}}/{} [{}] {:3.0f}%  {} samples/s{}", step, digits, total, bar,
                       frac * 100.0, short_rate(samples_per_s), tail);
}

std::string format_progress_line(int64_t step, int64_t total, double loss, double samples_per_s) {
    if (std::isnan(loss))
        return fmt::format("step {}/{}  {:.0f} samples/s", step, total, samples_per_s);
    return fmt::format("step {}/{}  loss {:.5f}  {:.0f} samples/s", step, total, loss,
                       samples_per_s);
}

Progress::Progress(int64_t total_steps, int64_t log_every)
    : Progress(total_steps, log_every, default_mode()) {}

Progress::Progress(int64_t total_steps, int64_t log_every, Mode mode)
    : total_steps_(total_steps), log_every_(std::max<int64_t>(1, log_every)), mode_(mode) {}

Progress::~Progress() {
    finish();
}

void Progress::update(int64_t step, double loss, double samples_per_s) {
    step_ = step;
    loss_ = loss;
    samples_per_s_ = samples_per_s;
    if (mode_ == Mode::kLines) {
        if (step % log_every_ == 0 || step == total_steps_) {
            log::root().info("{}", format_progress_line(step, total_steps_, loss, samples_per_s));
        }
        return;
    }
    if (mode_ != Mode::kBar) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (step == total_steps_ || !drawn_ || now - last_draw_ >= kRedrawInterval) {
        last_draw_ = now;
        draw();
    }
}

void Progress::draw() {
    // \r returns to the start of the line, \033[K clears what a longer previous bar left.
    std::fprintf(
        stderr, "\r%s\033[K",
        format_progress_bar(step_, total_steps_, loss_, samples_per_s_, kBarWidth).c_str());
    std::fflush(stderr);
    drawn_ = true;
}

void Progress::message(const std::string& text) {
    if (mode_ == Mode::kBar && drawn_) {
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    }
    log::root().info("{}", text);
    if (mode_ == Mode::kBar && drawn_) {
        draw();
    }
}

void Progress::finish() {
    if (mode_ == Mode::kBar && drawn_) {
        std::fputc('\n', stderr);
        std::fflush(stderr);
        drawn_ = false;
    }
}

}  // namespace shardrec::train
