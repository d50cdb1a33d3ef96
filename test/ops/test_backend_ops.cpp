// Runs every OpCase on every backend against the float64 reference, and fails for any op without
// a case (coverage gate). A backend that is absent is reported as not run, never as passed.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "kernels/device_ceilings.h"
#include "test/ops/check_case.h"

using namespace shardrec;
using namespace shardrec::test;

TEST_CASE("backend ops: every case matches the float64 reference on the CPU", "[ops][cpu]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") on cpu") {
            check_case(*c, Device::cpu());
        }
    }
}

TEST_CASE("backend ops: every case is deterministic on the CPU", "[ops][cpu]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") twice") {
            check_case_deterministic(*c, Device::cpu());
        }
    }
}

TEST_CASE("backend ops: every op has at least one case that checks it", "[ops][coverage]") {
    std::set<kernels::OpKind> covered;  // by a case that checks correctness, not a bench-only one
    for (auto& c : all_op_cases()) {
        if (!c->bench_only())
            covered.insert(c->kind());
    }
    for (size_t i = 0; i < kernels::kNumOps; ++i) {
        const auto op = static_cast<kernels::OpKind>(i);
        INFO("op without a case: " << kernels::op_name(op));
        CHECK(covered.count(op) == 1);
    }
}

TEST_CASE("host ceilings: random-row reads are measured, and odd rows are refused", "[ops][cpu]") {
    // 256-byte rows of a 4 MiB table: small enough for a test, the path of bench_ops's %rr.
    const double gbps = kernels::host_random_row_gbps(256, size_t{4} << 20, 1 << 14, 1);
    CHECK(gbps > 0.01);
    CHECK(gbps < 1e5);
    CHECK_THROWS_WITH(kernels::host_random_row_gbps(6, size_t{4} << 20),
                      Catch::Matchers::Contains("rows of 6 bytes"));
}
