// require_close (compare.h) in its own file: it needs Catch2's runtime, which bench_ops, also
// linked with the test support library, does not have.
#include <catch2/catch.hpp>
#include <cmath>

#include "test/support/compare.h"

namespace shardrec::test {

void require_close(const std::vector<float>& got,
                   const std::vector<float>& want,
                   double abs,
                   double rel,
                   const std::string& what) {
    std::vector<double> ref(want.begin(), want.end()), mag(want.size());
    for (size_t i = 0; i < want.size(); ++i)
        mag[i] = std::fabs(ref[i]);
    const CompareResult r = compare(got, ref, mag, Tolerance::relative(rel, abs));
    INFO(what << ": " << r.report);
    REQUIRE(r.ok);
}

}  // namespace shardrec::test
