// Catch2 main for multi-rank tests (run under mpirun). Every rank runs every test; rank 0 reports,
// the other ranks write their report to a scratch file that is shown only when that rank failed.
// The pass/fail result is allreduced so every rank exits with the same code (nccl-tests' #wrong).
// A warn or error log that a test did not expect fails it, as in catch_main.cpp.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>

#include "comm/mpi_env.h"
#include "engine/core/log.h"
#include "test/support/compare.h"

namespace {

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

int run_catch(int argc, char** argv, int rank) {
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
    if (rank != 0 && scratch != "/dev/null") {
        if (rc != 0) {
            print_with_prefix(scratch, rank);
        }
        std::remove(scratch.c_str());
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    // A test that fails on one rank leaves its peers in a collective: they give up after this
    // instead of the default 600 s.
    setenv("SHARDREC_COMM_TIMEOUT_S", "30", /*overwrite=*/0);
    const shardrec::comm::ProcessInfo& info = shardrec::comm::init_process(&argc, &argv);
    auto sink = std::make_shared<FailOnWarnSink>();
    shardrec::log::root().sinks().push_back(sink);
    shardrec::log::all().sinks().push_back(sink);

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
