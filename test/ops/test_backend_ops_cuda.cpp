// The backend-ops cases on CUDA: every case against the float64 reference (outputs NaN-poisoned
// and guarded on the device), and bitwise determinism of two runs (the embedding backwards
// included: no atomics on weights). Runs with catch_cuda_main, which exits 77 (ctest "Not Run")
// when no GPU is visible.
#include "test/ops/check_case.h"

using namespace shardrec;
using namespace shardrec::test;

TEST_CASE("backend ops: every case matches the float64 reference on CUDA", "[ops][cuda]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") on cuda") {
            check_case(*c, Device::cuda(0));
        }
    }
}

TEST_CASE("backend ops: every case is bitwise deterministic on CUDA", "[ops][cuda]") {
    for (auto& c : all_op_cases()) {
        if (c->bench_only())
            continue;
        DYNAMIC_SECTION(kernels::op_name(c->kind()) << "(" << c->vars() << ") twice on cuda") {
            check_case_deterministic(*c, Device::cuda(0));
        }
    }
}
