#include "engine/core/log.h"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "engine/core/error.h"

namespace shardrec::log {
namespace {

struct Loggers {
    std::shared_ptr<spdlog::logger> root;
    std::shared_ptr<spdlog::logger> all;
};

Loggers make(int rank, int world_size, const std::string& host) {
    // Both loggers write to stderr so stdout stays clean for command output (plans, configs).
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    Loggers l;
    l.all = std::make_shared<spdlog::logger>("all", sink);
    l.all->set_pattern(
        fmt::format("[%H:%M:%S.%e] [r{}/{} {}] [%^%l%$] %v", rank, world_size, host));
    if (rank == 0) {
        l.root = std::make_shared<spdlog::logger>("root", sink);
        l.root->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    } else {
        l.root = std::make_shared<spdlog::logger>("root",
                                                  std::make_shared<spdlog::sinks::null_sink_mt>());
    }
    return l;
}

Loggers& loggers() {
    static Loggers l = [] {
        Loggers made = make(0, 1, "localhost");
        if (const char* lvl = std::getenv("SHARDREC_LOG_LEVEL")) {
            const auto level = spdlog::level::from_str(lvl);
            made.root->set_level(level);
            made.all->set_level(level);
        }
        return made;
    }();
    return l;
}

}  // namespace

void init(int rank, int world_size, const std::string& host) {
    const auto level = loggers().all->level();
    // Keep any extra sinks tests installed (the Catch2 main adds a failing sink).
    auto extra = loggers().all->sinks();
    Loggers l = make(rank, world_size, host);
    for (size_t i = 1; i < extra.size(); ++i) {
        l.all->sinks().push_back(extra[i]);
        l.root->sinks().push_back(extra[i]);
    }
    l.root->set_level(level);
    l.all->set_level(level);
    loggers() = l;
}

void set_level(const std::string& level) {
    const auto lvl = spdlog::level::from_str(level);
    SR_CHECK(lvl != spdlog::level::off || level == "off",
             "unknown log level '{}' (trace, debug, info, warn, error, off)", level);
    loggers().root->set_level(lvl);
    loggers().all->set_level(lvl);
}

spdlog::logger& root() {
    return *loggers().root;
}

spdlog::logger& all() {
    return *loggers().all;
}

}  // namespace shardrec::log
