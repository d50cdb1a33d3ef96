// The two checks every backend runs over every case (test_backend_ops for the CPU,
// test_backend_ops_cuda for CUDA): against the float64 reference with guards intact, and
// bitwise-identical outputs on a repeated run.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>

#include "test/ops/op_case.h"

namespace shardrec::test {

// extra_rel widens every output's bound by that much of its magnitude (reduced-precision math).
inline void check_case(OpCase& c, Device device, double extra_rel = 0) {
    c.make_inputs(test_seed());
    const std::vector<RefOutput> ref = c.reference();
    const CaseRun got = run_case(c, device, test_seed());
    REQUIRE(got.outputs.size() == ref.size());
    INFO("guards: " << got.guards);
    CHECK(got.guards.empty());
    for (size_t i = 0; i < ref.size(); ++i) {
        Tolerance tol = c.tolerance(i);
        tol.extra_rel += extra_rel;
        const CompareResult r =
            compare(checked_values(got.outputs[i], ref[i]), ref[i].value, ref[i].mag, tol);
        INFO("output " << ref[i].name << ": " << r.report);
        CHECK(r.ok);
    }
}

inline void check_case_deterministic(OpCase& c, Device device) {
    const CaseRun first = run_case(c, device, test_seed());
    const CaseRun second = run_case(c, device, test_seed());
    REQUIRE(first.outputs.size() == second.outputs.size());
    for (size_t i = 0; i < first.outputs.size(); ++i) {
        const std::vector<double>& a = first.outputs[i];
        const std::vector<double>& b = second.outputs[i];
        REQUIRE(a.size() == b.size());
        INFO("output " << i << " differs between two runs of the same inputs");
        CHECK(std::memcmp(a.data(), b.data(), b.size() * sizeof(double)) == 0);
    }
}

}  // namespace shardrec::test
