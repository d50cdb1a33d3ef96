// profile::Range on the CPU: regions nest by path, count their ranges and add up their time;
// collect() inside an open range is an error.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "engine/core/profile.h"

using namespace shardrec;

namespace {

void sleep_ms(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

const profile::RegionTime& find(const std::vector<profile::RegionTime>& all,
                                const std::string& name) {
    for (const auto& r : all) {
        if (r.name == name)
            return r;
    }
    FAIL("no region " << name);
    return all.front();
}

}  // namespace

TEST_CASE("profile: ranges nest by path, count and time their regions", "[core]") {
    Stream& s = Stream::cpu();
    {
        profile::Range off("ignored", s);  // before enable(): records nothing
    }
    profile::enable(Device::cpu());
    REQUIRE(profile::enabled());
    profile::reset();
    for (int step = 0; step < 2; ++step) {
        profile::Range outer("forward", s);
        {
            profile::Range a("dense_arch", s);
            sleep_ms(4);
        }
        {
            profile::Range b("sparse_arch", s);
            profile::Range c("lookup", s);
            sleep_ms(2);
        }
    }
    {
        profile::Range other("dense_arch", s);  // the same name elsewhere is another region
    }
    const auto regions = profile::collect();
    REQUIRE(regions.size() == 5);
    CHECK(regions[0].name == "forward");
    CHECK(regions[1].name == "forward/dense_arch");
    CHECK(regions[2].name == "forward/sparse_arch");
    CHECK(regions[3].name == "forward/sparse_arch/lookup");
    CHECK(regions[4].name == "dense_arch");
    CHECK(find(regions, "forward/sparse_arch/lookup").depth == 2);
    CHECK(find(regions, "dense_arch").depth == 0);
    for (const auto& r : regions)
        CHECK(r.count == 2 - (r.name == "dense_arch" ? 1 : 0));
    const double dense = find(regions, "forward/dense_arch").total_ms;
    const double lookup = find(regions, "forward/sparse_arch/lookup").total_ms;
    CHECK(dense >= 8.0);
    CHECK(lookup >= 4.0);
    CHECK(find(regions, "forward/sparse_arch").total_ms >= lookup);
    CHECK(find(regions, "forward").total_ms >= dense + lookup);

    // collect() empties the recorded ranges; reset() also forgets the regions.
    CHECK(profile::collect()[1].count == 2);
    profile::reset();
    CHECK(profile::collect().empty());
    {
        profile::Range open("open", s);
        CHECK_THROWS_WITH(profile::collect(), Catch::Contains("inside the open range 'open'"));
    }
    CHECK(profile::collect().size() == 1);
}
