// The suite's comparator is checked as the references are: NaN never passes for a number (nor a
// number for NaN), a wrong element of small magnitude fails, sizes must agree.
#include <catch2/catch.hpp>
#include <cmath>

#include "test/support/compare.h"

using shardrec::test::compare_relative;

TEST_CASE("compare_relative: NaN, small wrong values and sizes fail; close values pass",
          "[reference][compare]") {
    const std::vector<double> want = {1.0, -2.0, 0.5, 3.0};
    CHECK(compare_relative({1.0, -2.0, 0.5, 3.0}, want, 1e-12).ok);
    CHECK(compare_relative({1.0 + 1e-9, -2.0, 0.5, 3.0}, want, 1e-8).ok);
    CHECK(!compare_relative({1.0 + 1e-6, -2.0, 0.5, 3.0}, want, 1e-8).ok);
    CHECK(!compare_relative({NAN, -2.0, 0.5, 3.0}, want, 1e-3).ok);
    CHECK(!compare_relative({1.0, -2.0, 0.5, 3.0}, {NAN, -2.0, 0.5, 3.0}, 1e-3).ok);
    CHECK(compare_relative({NAN, 1.0}, {NAN, 1.0}, 1e-12).ok);
    CHECK(!compare_relative({INFINITY}, {1e308}, 1e-3).ok);
    CHECK(!compare_relative({1.0, -2.0}, want, 1e-3).ok);
    // Gradients of magnitude 1e-8 that are wrong (here: zero) fail at any sensible tolerance; a
    // floor of 1 in the denominator would have passed them.
    const std::vector<double> tiny = {1e-8, -3e-8, 2e-8};
    CHECK(!compare_relative({0.0, 0.0, 0.0}, tiny, 1e-4).ok);
    CHECK(compare_relative({1e-8, -3e-8, 2e-8 * (1 + 1e-9)}, tiny, 1e-7).ok);
    const auto r = compare_relative({1.0, -2.5, 0.5, 3.0}, want, 1e-6);
    CHECK_THAT(r.report, Catch::Contains("worst at [1]"));
}
