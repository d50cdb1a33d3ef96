// What this binary is: the project version and the commit it was built from (with "-dirty" when
// the working tree had uncommitted changes), for `shardrec --version`, run logs and results.
#pragma once

namespace shardrec {

const char* version();
const char* git_commit();

}  // namespace shardrec
