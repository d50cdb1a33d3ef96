// The README's config reference is the generated one: docs cannot drift from the config structs.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/config/config.h"

TEST_CASE("README: the config reference section equals config_reference()", "[config]") {
    const auto root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
    std::ifstream in(root / "README.md");
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string readme = ss.str();
    const std::string begin = "<!-- config-reference:begin -->\n";
    const std::string end = "<!-- config-reference:end -->";
    const auto b = readme.find(begin);
    const auto e = readme.find(end);
    REQUIRE(b != std::string::npos);
    REQUIRE(e != std::string::npos);
    const std::string section = readme.substr(b + begin.size(), e - b - begin.size());
    INFO("regenerate with: scripts/update_readme_reference.sh");
    CHECK(section == shardrec::config_reference());
}
