// The one error type and the always-on / debug-only check macros (STYLE.md R4). Library code
// throws; only tools/main.cpp decides how a process dies. Messages start with "rank R/N on HOST"
// and say what is wrong with the user's input; where a check failed (its condition, function,
// file and line) is for developers and goes to the debug log (SHARDREC_LOG_LEVEL=debug).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace shardrec {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Set once by the MPI bootstrap so every message names the failing process.
void set_error_context(int rank, int world_size, const std::string& host);
std::string error_context();  // "rank 0/1 on host"

// Throws Error("CONTEXT: message"), after logging the message with the failed check at debug.
[[noreturn]] void throw_error(
    const char* cond, const char* func, const char* file, int line, const std::string& message);

}  // namespace shardrec

#define SR_CHECK(cond, ...)                                              \
    do {                                                                 \
        if (!(cond)) {                                                   \
            ::shardrec::throw_error(#cond, __func__, __FILE__, __LINE__, \
                                    ::fmt::format(__VA_ARGS__));         \
        }                                                                \
    } while (0)

#ifdef NDEBUG
#define SR_DCHECK(cond, ...) \
    do {                     \
    } while (0)
#else
#define SR_DCHECK(cond, ...) SR_CHECK(cond, __VA_ARGS__)
#endif
