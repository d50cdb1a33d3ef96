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

constexpr const char* kLevelNames = "trace, debug, info, warn, error, off";

// spdlog reads an unknown name as `off`, which would silence the errors too.
bool parse_level(const std::string& name, spdlog::level::level_enum& level) {
    level = spdlog::level::from_str(name);
    return level != spdlog::level::off || name == "off";
}

// SHARDREC_LOG_LEVEL when it names a level; an unknown one is kept for init() to refuse (this
// runs inside the loggers' own initialisation, which must not throw).
std::string& bad_env_level() {
    static std::string bad;
    return bad;
}

Loggers& loggers() {
    static Loggers l = [] {
        Loggers made = make(0, 1, "localhost");
        if (const char* name = std::getenv("SHARDREC_LOG_LEVEL")) {
            spdlog::level::level_enum level{};
            if (parse_level(name, level)) {
                made.root->set_level(level);
                made.all->set_level(level);
            } else {
                bad_env_level() = name;
            }
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
    if (!bad_env_level().empty()) {
        throw Error(fmt::format("{}: SHARDREC_LOG_LEVEL='{}' is not a log level; use one of {}",
                                error_context(), bad_env_level(), kLevelNames));
    }
}

void set_level(const std::string& level) {
    spdlog::level::level_enum lvl{};
    if (!parse_level(level, lvl)) {
        throw Error(fmt::format("{}: '{}' is not a log level; use one of {}", error_context(),
                                level, kLevelNames));
    }
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
