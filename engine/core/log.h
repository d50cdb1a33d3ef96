// Two loggers chosen by intent (STYLE.md R11): root() speaks on rank 0 only (progress, config
// echo); all() speaks on every rank with a "[r3/8 host]" prefix (warnings, errors). The level
// comes from SHARDREC_LOG_LEVEL or the config.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace shardrec::log {

// Called once by the bootstrap; before that both loggers behave as rank 0 of 1. Throws Error
// when SHARDREC_LOG_LEVEL is set to a name that is not a level (until then: info).
void init(int rank, int world_size, const std::string& host);
// trace, debug, info, warn, error, off; anything else is an Error naming them.
void set_level(const std::string& level);

spdlog::logger& root();
spdlog::logger& all();

}  // namespace shardrec::log
