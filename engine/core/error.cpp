#include "engine/core/error.h"

#include <unistd.h>

#include "engine/core/log.h"

namespace shardrec {
namespace {

std::string& context() {
    static std::string ctx = [] {
        char host[256] = "unknown";
        gethostname(host, sizeof(host) - 1);
        return fmt::format("rank 0/1 on {}", host);
    }();
    return ctx;
}

}  // namespace

void set_error_context(int rank, int world_size, const std::string& host) {
    context() = fmt::format("rank {}/{} on {}", rank, world_size, host);
}

std::string error_context() {
    return context();
}

void throw_error(
    const char* cond, const char* func, const char* file, int line, const std::string& message) {
    // Logged where it is thrown: the error may be rethrown with more context, or sent to rank 0.
    log::all().debug("{} ({} failed in {} {}:{})", message, cond, func, file, line);
    throw Error(fmt::format("{}: {}", context(), message));
}

}  // namespace shardrec
