// Catch2 main for CPU tests. A warn or error log that a test did not expect fails it
// (tiny-cuda-nn): tests that provoke warnings on purpose wrap them in ExpectLogs.
#define CATCH_CONFIG_RUNNER
#include <spdlog/sinks/base_sink.h>

#include <catch2/catch.hpp>
#include <mutex>

#include "engine/core/log.h"
#include "test/support/compare.h"

namespace {

class FailOnWarnSink : public spdlog::sinks::base_sink<std::mutex> {
protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        if (msg.level >= spdlog::level::warn && !shardrec::test::logs_expected()) {
            shardrec::test::record_unexpected_log(
                std::string(msg.payload.data(), msg.payload.size()));
        }
    }

    void flush_() override {}
};

}  // namespace

int main(int argc, char** argv) {
    auto sink = std::make_shared<FailOnWarnSink>();
    shardrec::log::root().sinks().push_back(sink);
    shardrec::log::all().sinks().push_back(sink);
    const int rc = Catch::Session().run(argc, argv);
    if (rc == 0 && shardrec::test::unexpected_log_count() > 0)
        return 1;
    return rc;
}
