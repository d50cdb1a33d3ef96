# Writes OUT with the working tree's commit for `shardrec --version` and run logs: run at every
# build, it rewrites OUT only when the commit (or the -dirty mark) changed, so a new commit
# rebuilds one file instead of going stale until the next configure.
execute_process(COMMAND git describe --always --dirty --abbrev=7 WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
    set(commit unknown)
endif()
set(text "#define SHARDREC_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
    file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
    file(WRITE ${OUT} "${text}")
endif()
