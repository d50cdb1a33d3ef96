// Error messages: what the user sees is the message alone; the failed check (condition, function,
// file:line) goes to the debug log. Log levels are names, and an unknown one is refused.
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/log.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

// Captures log::all() at debug level while it lives.
class DebugCapture {
public:
    DebugCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
        saved_ = log::all().level();
        // Only this sink takes the debug lines; stderr keeps to info and above.
        for (auto& sink : log::all().sinks()) {
            sink_levels_.push_back(sink->level());
            sink->set_level(std::max(sink->level(), spdlog::level::info));
        }
        log::all().sinks().push_back(sink_);
        log::all().set_level(spdlog::level::debug);
    }

    ~DebugCapture() {
        auto& sinks = log::all().sinks();
        sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
        for (size_t i = 0; i < sinks.size() && i < sink_levels_.size(); ++i) {
            sinks[i]->set_level(sink_levels_[i]);
        }
        log::all().set_level(saved_);
    }

    DebugCapture(const DebugCapture&) = delete;
    DebugCapture& operator=(const DebugCapture&) = delete;

    std::string text() const { return out_.str(); }

private:
    std::ostringstream out_;
    std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
    spdlog::level::level_enum saved_{};
    std::vector<spdlog::level::level_enum> sink_levels_;
};

}  // namespace

TEST_CASE("SR_CHECK: the message is the error, the failed check goes to the debug log", "[error]") {
    const DebugCapture capture;
    const int rows = 7;
    try {
        SR_CHECK(rows > 10, "table 't0' has {} rows, fewer than its 10 ids", rows);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(std::string(e.what()) ==
              error_context() + ": table 't0' has 7 rows, fewer than its 10 ids");
        CHECK_THAT(e.what(), !Contains("failed in") && !Contains(".cpp:"));
    }
    CHECK_THAT(capture.text(), Contains("table 't0' has 7 rows") &&
                                   Contains("(rows > 10 failed in") && Contains("test_error.cpp:"));
}

TEST_CASE("log::set_level: an unknown level is an error naming the valid ones", "[error]") {
    const auto saved = log::all().level();
    try {
        log::set_level("verbose");
        FAIL("no error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Contains("'verbose' is not a log level") &&
                                 Contains("trace, debug, info, warn, error, off") &&
                                 !Contains("failed in"));
    }
    CHECK(log::all().level() == saved);  // unchanged
    log::set_level("off");
    CHECK(log::all().level() == spdlog::level::off);
    log::all().set_level(saved);
    log::root().set_level(saved);
}
