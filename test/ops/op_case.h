// The backend-ops harness (STYLE.md R3): one OpCase is one op at one parameter point. The harness
// runs every case on every backend, compares each output with the float64 reference under a
// derived bound, checks guard bytes around every output, and times cases in bench_ops.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "kernels/ops.h"
#include "test/support/compare.h"

namespace shardrec::test {

// One output of the reference: value and magnitude (sum of |terms|) per element, in float64.
struct RefOutput {
    std::string name;
    std::vector<double> value;
    std::vector<double> mag;
};

class OpCase {
public:
    virtual ~OpCase() = default;
    virtual kernels::OpKind kind() const = 0;
    virtual std::string vars() const = 0;  // "B=64,D=33,L=0..20,weighted=1,mode=mean"
    // Inputs are generated in the tested dtype; the reference consumes exactly those values.
    virtual void make_inputs(uint64_t seed) = 0;
    virtual std::vector<RefOutput> reference() const = 0;
    // Runs the engine op; returns outputs in the order of reference(). Outputs must be made with
    // make_output so the harness can poison them and check their guard bytes.
    virtual std::vector<Tensor> run(Device device) = 0;
    // Bound for output i. Default: fp32 accumulation over terms(i) terms. Override with a comment.
    virtual Tolerance tolerance(size_t output) const;

    virtual int64_t terms(size_t /*output*/) const { return 1; }

    virtual double bytes() const { return 0; }  // bytes moved, for GB/s (state the formula)

    virtual double flops() const { return 0; }

    // GEMMs (M, N, K) the op performs, so bench_ops can time cblas_sgemm on them as the ceiling.
    struct Gemm {
        int64_t m, n, k;
    };

    virtual std::vector<Gemm> gemms() const { return {}; }

    // Large cases timed by bench_ops only; test_backend_ops skips them (they take seconds).
    virtual bool bench_only() const { return false; }

    // Guarded, NaN-poisoned output (f32: NaN, integers: all bits set).
    Tensor make_output(const Shape& shape, DType dtype = DType::kF32);
    // A guarded output initialised with a copy of `init` (for in-place updates).
    Tensor make_output_like(const Tensor& init);
    // Empty string when every guard is intact, else which output was overrun.
    std::string check_guards() const;

    void clear_outputs() { guarded_.clear(); }

private:
    struct Guarded {
        Tensor buffer;
        size_t data_bytes;
    };

    std::vector<Guarded> guarded_;
};

using OpCaseFactory = std::function<std::vector<std::unique_ptr<OpCase>>()>;

// Each test/ops/cases_<op>.cpp registers its cases with one static RegisterOpCases.
struct RegisterOpCases {
    explicit RegisterOpCases(OpCaseFactory factory);
};

std::vector<std::unique_ptr<OpCase>> all_op_cases();

// Converts any tensor (f32, f16, bf16, i32, i64) to float64 values.
std::vector<double> to_double(const Tensor& t);

}  // namespace shardrec::test
