// Runs every OpCase on every backend against the float64 reference, and fails for any op without
// a case (coverage gate). A backend that is absent is reported as not run, never as passed.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "test/ops/op_case.h"

using namespace shardrec;
using namespace shardrec::test;

namespace {

void check_case(OpCase& c, Device device) {
    c.make_inputs(test_seed());
    const std::vector<RefOutput> ref = c.reference();
    c.clear_outputs();
    const std::vector<Tensor> got = c.run(device);
    REQUIRE(got.size() == ref.size());
    const std::string guards = c.check_guards();
    INFO("guards: " << guards);
    CHECK(guards.empty());
    for (size_t i = 0; i < ref.size(); ++i) {
        const std::vector<double> g = to_double(got[i]);
        std::vector<float> gf(g.begin(), g.end());
        const CompareResult r = compare(gf, ref[i].value, ref[i].mag, c.tolerance(i));
        INFO("output " << ref[i].name << ": " << r.report);
        CHECK(r.ok);
    }
}

}  // namespace

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
            c->make_inputs(test_seed());
            c->clear_outputs();
            const std::vector<Tensor> first = c->run(Device::cpu());
            std::vector<std::vector<double>> a;
            for (const Tensor& t : first)
                a.push_back(to_double(t));
            c->make_inputs(test_seed());
            c->clear_outputs();
            const std::vector<Tensor> second = c->run(Device::cpu());
            for (size_t i = 0; i < a.size(); ++i) {
                const std::vector<double> b = to_double(second[i]);
                REQUIRE(a[i].size() == b.size());
                CHECK(std::memcmp(a[i].data(), b.data(), b.size() * sizeof(double)) == 0);
            }
        }
    }
}

TEST_CASE("backend ops: every op has at least one case", "[ops][coverage]") {
    std::set<kernels::OpKind> covered;
    for (auto& c : all_op_cases())
        covered.insert(c->kind());
    for (size_t i = 0; i < kernels::kNumOps; ++i) {
        const auto op = static_cast<kernels::OpKind>(i);
        INFO("op without a case: " << kernels::op_name(op));
        CHECK(covered.count(op) == 1);
    }
}
