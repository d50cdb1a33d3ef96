#include "engine/core/version.h"

#include <fmt/format.h>

#include <ctime>

#include "shardrec_git_commit.h"  // generated at build time by cmake/git_commit.cmake

namespace shardrec {

const char* version() {
    return SHARDREC_VERSION;
}

const char* git_commit() {
    return SHARDREC_GIT_COMMIT;
}

std::string provenance_json_fields() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char date[32];
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return fmt::format("\"commit\":\"{}\",\"date\":\"{}\"", git_commit(), date);
}

}  // namespace shardrec
