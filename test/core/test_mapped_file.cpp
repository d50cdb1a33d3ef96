// map_file_region: the bytes of a file region on a read-only mapping that lives as long as the
// tensor or a view of it, and clear errors for a missing or short file.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/core/mapped_file.h"

using namespace shardrec;

namespace {

bool mapped(const std::string& path) {
    std::ifstream maps("/proc/self/maps");
    std::stringstream s;
    s << maps.rdbuf();
    return s.str().find(path) != std::string::npos;
}

}  // namespace

TEST_CASE("map_file_region: a region of a file, mapped while a view of it lives", "[core]") {
    const std::string path =
        (std::filesystem::temp_directory_path() / "shardrec_mapped_file_test.bin").string();
    std::string bytes(3 * 4096 + 100, '\0');
    for (size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<char>(i * 7 + 3);
    std::ofstream(path, std::ios::binary) << bytes;
    {
        // An offset inside the second page: the mapping starts at its page, the tensor at it.
        Tensor region = map_file_region(path, 4096 + 37, 5000);
        REQUIRE(region.dtype() == DType::kU8);
        REQUIRE(region.numel() == 5000);
        CHECK(mapped(path));
        const Tensor view = region.slice(100, 200);
        region = Tensor();  // the view keeps the mapping
        CHECK(mapped(path));
        for (int64_t i = 0; i < view.numel(); ++i) {
            INFO("byte " << i);
            REQUIRE(view.data<uint8_t>()[i] ==
                    static_cast<uint8_t>(bytes[static_cast<size_t>(4096 + 37 + 100 + i)]));
        }
    }
    CHECK(!mapped(path));  // unmapped with the last view
    CHECK(map_file_region(path, 10, 0).numel() == 0);
    CHECK_THROWS_WITH(map_file_region(path, 4096, 3 * 4096),
                      Catch::Contains(path) && Catch::Contains("holds 12388 bytes"));
    std::filesystem::remove(path);
    CHECK_THROWS_WITH(map_file_region(path, 0, 1), Catch::Contains("cannot open '" + path + "'"));
}
