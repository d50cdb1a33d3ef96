// The one Catch2 main of every test executable, compiled four ways (test/CMakeLists.txt):
//   plain                 CPU tests in one process
//   SHARDREC_TEST_MPI     under mpirun: every rank runs every test; rank 0 reports, the other
//                         ranks write their report to a scratch file shown only when that rank
//                         failed; the pass/fail result is allreduced so every rank exits with the
//                         same code (nccl-tests' #wrong)
//   SHARDREC_TEST_CUDA    exits 77 (ctest "Not Run", never passed) when no CUDA device is visible
//                         or the build has no CUDA; under MPI when any rank sees none, or, with
//                         SHARDREC_GPU_PER_RANK (NCCL), fewer devices than ranks on a node
// Every way: a warn or error log that a test did not expect fails it (tiny-cuda-nn; tests that
// provoke warnings on purpose wrap them in ExpectLogs), and a test case that asserts nothing
// fails (under MPI, a case in which no rank asserted), so a test cannot pass by checking
// nothing, unless it called test::not_run(why) (on some rank): it is then listed at the end as
// "not run: <case> (<why>)". Cases that can only check at some world sizes carry [even_ranks]
// (rank pairs) or [multirank] (two or more ranks) and are run only there (test/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <spdlog/sinks/base_sink.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/log.h"
#include "test/support/compare.h"
#ifdef SHARDREC_TEST_MPI
#include <mpi.h>
#include <unistd.h>

#include "comm/mpi_env.h"
#endif
#ifdef SHARDREC_TEST_CUDA
#include "engine/core/cuda/cuda_runtime_api.h"
#endif

namespace {

#ifdef SHARDREC_TEST_CUDA
constexpr int kNotRun = 77;
#endif

class FailOnWarnSink : public spdlog::sinks::base_sink<std::mutex> {
protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        if (msg.level >= spdlog::level::warn && !shardrec::test::logs_expected()) {
            shardrec::test::record_unexpected_log(
                std::string(msg.payload.data(), msg.payload.size()));
        }
    }

    void flush_() override {}
};

// A scratch file for a non-reporting rank's Catch output.
std::string make_scratch_file(int rank) {
    std::string path = "/tmp/shardrec_catch_r" + std::to_string(rank) + "_XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) {
        return "/dev/null";
    }
    close(fd);
    return path;
}

void print_with_prefix(const std::string& path, int rank) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        std::cerr << "[rank " << rank << "] " << line << "\n";
    }
}

// Names of the cases that asserted nothing (on any rank) without saying why.
std::vector<std::string>& cases_without_assertions() {
    static std::vector<std::string> names;
    return names;
}

// "<case> (<why>)" of the cases not run.
std::vector<std::string>& cases_not_run() {
    static std::vector<std::string> names;
    return names;
}

// Under MPI a case may assert on some ranks only (rank 0 checks what every rank wrote): it asserts
// nothing only when no rank did, and is not run when a rank said so. Every rank runs the same
// cases in the same order, so one allreduce per case agrees on it.
class CaseOutcomes : public Catch::TestEventListenerBase {
public:
    using TestEventListenerBase::TestEventListenerBase;

    void testCaseEnded(const Catch::TestCaseStats& stats) override {
        long long counts[2] = {static_cast<long long>(stats.totals.assertions.total()), 0};
        std::string why = shardrec::test::take_not_run();
        counts[1] = why.empty() ? 0 : 1;
#ifdef SHARDREC_TEST_MPI
        MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (counts[1] > 0 && why.empty())
            why = "on another rank";
#endif
        if (counts[1] > 0)
            cases_not_run().push_back(stats.testInfo.name + " (" + why + ")");
        else if (counts[0] == 0)
            cases_without_assertions().push_back(stats.testInfo.name);
    }
};
CATCH_REGISTER_LISTENER(CaseOutcomes)

// Runs the session; non-zero when a test failed, asserted nothing, or logged unexpectedly.
int run_catch(int argc, char** argv, int rank) {
    auto sink = std::make_shared<FailOnWarnSink>();
    shardrec::log::root().sinks().push_back(sink);
    shardrec::log::all().sinks().push_back(sink);
    Catch::Session session;
    int rc = session.applyCommandLine(argc, argv);
    if (rc != 0) {
        return rc;
    }
    const std::string scratch = rank == 0 ? "" : make_scratch_file(rank);
    if (rank != 0) {
        session.configData().outputFilename = scratch;
        session.configData().useColour = Catch::UseColour::No;
    }
    rc = session.run();
    if (rc == 0 && shardrec::test::unexpected_log_count() > 0) {
        rc = 1;
    }
    for (const std::string& name : cases_without_assertions()) {
        if (rank == 0)
            std::cerr << "test case '" << name << "' asserted nothing (on any rank)\n";
        rc = rc == 0 ? 1 : rc;
    }
    for (const std::string& name : cases_not_run()) {
        if (rank == 0)
            std::cout << "not run: " << name << "\n";
    }
    if (rank != 0 && scratch != "/dev/null") {
        if (rc != 0) {
            print_with_prefix(scratch, rank);
        }
        std::remove(scratch.c_str());
    }
    return rc;
}

}  // namespace

#ifndef SHARDREC_TEST_MPI

int main(int argc, char** argv) {
#ifdef SHARDREC_TEST_CUDA
    if (shardrec::cuda::device_count() == 0) {
        std::printf("no CUDA device visible (or built without CUDA): not run\n");
        return kNotRun;
    }
#endif
    return run_catch(argc, argv, 0);
}

#else

int main(int argc, char** argv) {
    // A test that fails on one rank leaves its peers in a collective: they give up after this
    // instead of the default 600 s.
    setenv("SHARDREC_COMM_TIMEOUT_S", "30", /*overwrite=*/0);
    const shardrec::comm::ProcessInfo& info = shardrec::comm::init_process(&argc, &argv);
#ifdef SHARDREC_TEST_CUDA
    int devices = shardrec::cuda::device_count();
    int min_devices = 0;
    MPI_Allreduce(&devices, &min_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#ifdef SHARDREC_GPU_PER_RANK
    // NCCL needs a GPU per rank: two ranks on one device fail in ncclCommInitRank.
    const bool enough = min_devices > 0 && info.local_size <= min_devices;
#else
    const bool enough = min_devices > 0;
#endif
    if (!enough) {
        if (info.rank == 0)
            std::fprintf(stderr, "%d CUDA device(s) for %d ranks per node: not run\n", min_devices,
                         info.local_size);
        shardrec::comm::finalize_process();
        return kNotRun;
    }
#endif
    int failed = 0;
    try {
        failed = run_catch(argc, argv, info.rank) != 0 ? 1 : 0;
    } catch (const std::exception& e) {
        std::cerr << "[rank " << info.rank << "] " << e.what() << "\n";
        failed = 1;
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed && info.rank == 0 && info.world_size > 1) {
        std::cerr << "FAILED on at least one of " << info.world_size << " ranks\n";
    }
    shardrec::comm::finalize_process();
    return failed;
}

#endif
