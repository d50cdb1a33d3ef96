#include "engine/core/version.h"

#include "shardrec_git_commit.h"  // generated at build time by cmake/git_commit.cmake

namespace shardrec {

const char* version() {
    return SHARDREC_VERSION;
}

const char* git_commit() {
    return SHARDREC_GIT_COMMIT;
}

}  // namespace shardrec
