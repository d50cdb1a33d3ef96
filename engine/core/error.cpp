#include "engine/core/error.h"

#include <unistd.h>

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
    throw Error(
        fmt::format("{}: {} ({} failed in {} {}:{})", context(), message, cond, func, file, line));
}

}  // namespace shardrec
