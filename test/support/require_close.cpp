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
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO(what << " [" << i << "]: got " << got[i] << ", want " << want[i]);
        REQUIRE(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i]));
    }
}

}  // namespace shardrec::test
