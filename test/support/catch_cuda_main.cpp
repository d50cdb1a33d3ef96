// Catch2 main for tests that need a GPU: exits 77 when no CUDA device is visible (or the build
// has no CUDA), which ctest reports as "Not Run" (SKIP_RETURN_CODE 77), never as passed.
// Otherwise it is catch_main.cpp: a warn or error log a test did not expect fails it.
#define CATCH_CONFIG_RUNNER
#include <spdlog/sinks/base_sink.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <mutex>

#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/log.h"
#include "test/support/compare.h"

namespace {

constexpr int kSkipped = 77;

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
    if (shardrec::cuda::device_count() == 0) {
        std::printf("no CUDA device visible (or built without CUDA): not run\n");
        return kSkipped;
    }
    auto sink = std::make_shared<FailOnWarnSink>();
    shardrec::log::root().sinks().push_back(sink);
    shardrec::log::all().sinks().push_back(sink);
    const int rc = Catch::Session().run(argc, argv);
    if (rc == 0 && shardrec::test::unexpected_log_count() > 0)
        return 1;
    return rc;
}
