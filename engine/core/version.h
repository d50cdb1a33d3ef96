// What this binary is: the project version and the commit it was built from (with "-dirty" when
// the working tree had uncommitted changes), for `shardrec --version`, run logs and results.
#pragma once

#include <string>

namespace shardrec {

const char* version();
const char* git_commit();

// `"commit":"<git describe --always --dirty>","date":"<UTC ISO 8601 now>"`: the fields every
// benchmark result row carries, so each number names the build that made it and when.
std::string provenance_json_fields();

}  // namespace shardrec
