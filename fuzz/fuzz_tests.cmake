# The fuzz tests (included from test/CMakeLists.txt). SHARDREC_FUZZ=AUTO registers them when a
# clang with libFuzzer is found (Debian: clang-14 and libclang-rt-14-dev); ON requires one; OFF
# skips them. fuzz_build configures and builds the separate clang project in fuzz/ (a CTest
# fixture), then each fuzz_<target> runs for SHARDREC_FUZZ_SECONDS from the seed corpus in
# fuzz/corpus/<target>/, writing what it discovers to the build tree (never to the repository).
set(SHARDREC_FUZZ AUTO CACHE STRING "Fuzz tests with clang's libFuzzer: AUTO (if found), ON or OFF")
set_property(CACHE SHARDREC_FUZZ PROPERTY STRINGS AUTO ON OFF)
set(SHARDREC_FUZZ_SECONDS 15 CACHE STRING "Seconds each fuzz test runs")

if(NOT SHARDREC_FUZZ STREQUAL "OFF")
    find_program(SHARDREC_FUZZ_CXX NAMES clang++-14 clang++ DOC "clang for the libFuzzer targets")
    set(fuzz_ok FALSE)
    if(SHARDREC_FUZZ_CXX)
        # Does it link a libFuzzer program (the runtime is a separate Debian package)?
        set(probe_dir ${CMAKE_BINARY_DIR}/fuzz_probe)
        file(WRITE ${probe_dir}/probe.cpp
             "#include <cstddef>\n#include <cstdint>\n"
             "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
        execute_process(COMMAND ${SHARDREC_FUZZ_CXX} -fsanitize=fuzzer ${probe_dir}/probe.cpp
                                -o ${probe_dir}/probe
                        RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
        if(probe_rc EQUAL 0)
            set(fuzz_ok TRUE)
        endif()
    endif()
    if(NOT fuzz_ok AND SHARDREC_FUZZ STREQUAL "ON")
        message(FATAL_ERROR "SHARDREC_FUZZ=ON but no clang++ links -fsanitize=fuzzer "
                            "(apt-get install clang-14 libclang-rt-14-dev)")
    endif()
    if(fuzz_ok)
        message(STATUS "Fuzz tests: ${SHARDREC_FUZZ_CXX}, ${SHARDREC_FUZZ_SECONDS} s per target")
        set(fuzz_bin ${CMAKE_BINARY_DIR}/fuzz)
        add_test(NAME fuzz_build
                 COMMAND ${CMAKE_COMMAND} -E env CXX=${SHARDREC_FUZZ_CXX} sh -c
                         "${CMAKE_COMMAND} -S ${PROJECT_SOURCE_DIR}/fuzz -B ${fuzz_bin} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=${SHARDREC_FUZZ_CXX} > ${fuzz_bin}.configure.log && ${CMAKE_COMMAND} --build ${fuzz_bin} -j2")
        set_tests_properties(fuzz_build PROPERTIES LABELS "cpu;fuzz" FIXTURES_SETUP fuzz)
        foreach(target config criteo_tsv criteo_shard checkpoint_manifest plan score_request)
            add_test(NAME fuzz_${target}
                     COMMAND sh -c
                             "mkdir -p ${fuzz_bin}/found_${target} && ${fuzz_bin}/fuzz_${target} -max_total_time=${SHARDREC_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -artifact_prefix=${fuzz_bin}/crash_${target}_ ${fuzz_bin}/found_${target} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${target}")
            set_tests_properties(fuzz_${target} PROPERTIES LABELS "cpu;fuzz" FIXTURES_REQUIRED fuzz)
        endforeach()
    endif()
endif()
