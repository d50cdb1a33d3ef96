// input_file: a path that is missing, a directory or a device is named as such before any stream
// or mmap fails with its own words; a regular file and a pipe pass.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "engine/core/input_file.h"

using namespace shardrec;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("input_file: missing, directory and device paths are named as such", "[core]") {
    const fs::path dir = fs::temp_directory_path() / ("shardrec_input_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string file = (dir / "plan.yaml").string();
    std::ofstream(file) << "world_size: 1\n";

    CHECK(input_file_problem(file).empty());
    CHECK(read_input_file(file, "the plan file") == "world_size: 1\n");
    CHECK(input_file_problem((dir / "nope.yaml").string()) == "does not exist");
    CHECK(input_file_problem(file + "/x") == "does not exist");  // through a file
    CHECK(input_file_problem(dir.string()) == "is a directory, expected a file");
    CHECK(input_file_problem("/dev/null") == "is a device, expected a file");

    CHECK_THROWS_WITH(read_input_file(dir.string(), "the plan file (sharding.plan_file)"),
                      Contains("the plan file (sharding.plan_file) '" + dir.string() +
                               "' is a directory, expected a file"));
    CHECK_THROWS_WITH(
        open_input_file((dir / "nope.yaml").string(), "the config file"),
        Contains("the config file '" + (dir / "nope.yaml").string() + "' does not exist"));

    // A pipe (`<(...)` on a command line) is a file to read, not a problem.
    const std::string fifo = (dir / "fifo").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(input_file_problem(fifo).empty());

    if (::geteuid() != 0) {  // root reads anything
        fs::permissions(file, fs::perms::none);
        CHECK_THAT(input_file_problem(file), Contains("cannot be read: Permission denied"));
    }
    fs::remove_all(dir);
}
