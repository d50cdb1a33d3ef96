// The backend-ops harness (STYLE.md R3): one OpCase is one op at one parameter point. The harness
// runs every case on every backend, compares each output with the float64 reference under a
// derived bound, checks guard bytes around every output, and times cases in bench_ops.
// A case builds its inputs on the host; run() passes them through in() and makes its outputs
// with make_output, so the same case runs on whichever device the harness selected.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/ops.h"
#include "test/support/compare.h"

namespace shardrec::test {

// One output of the reference: value and magnitude (sum of |terms|) per element, in float64.
// With `index`, value[i] and mag[i] are those of output element index[i], and only the listed
// elements are checked (the GPU-sized cases check the rows a step touched and a sample of the
// rest instead of converting a 2 GiB table to float64).
struct RefOutput {
    RefOutput(std::string name_,
              std::vector<double> value_,
              std::vector<double> mag_,
              std::vector<int64_t> index_ = {})
        : name(std::move(name_)),
          value(std::move(value_)),
          mag(std::move(mag_)),
          index(std::move(index_)) {}

    std::string name;
    std::vector<double> value;
    std::vector<double> mag;
    std::vector<int64_t> index;
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

    // Random rows the op reads from a table, so bench_ops can measure the host's random-row read
    // ceiling (kernels::host_random_row_gbps) on the same table size and row width (%rr).
    // row_bytes 0: not a table op.
    struct RandomRows {
        int64_t row_bytes = 0;
        size_t table_bytes = 0;
    };

    virtual RandomRows random_rows() const { return {}; }

    // Large cases timed by bench_ops only; test_backend_ops skips them (they take seconds).
    virtual bool bench_only() const { return false; }

    // Bench cases of tables of millions of rows and large batches, whose rows are far beyond
    // any cache (a CPU's L3, an H100's L2): seconds each for their inputs and references, so
    // bench_ops times them after all the others. Implies bench_only().
    virtual bool large_bench() const { return false; }

    // An op with only a CPU backend so far (the quantized tables): the CUDA harness skips it.
    virtual bool cpu_only() const { return false; }

    // The device of the next runs (call after make_inputs: it drops the device copies of the
    // previous inputs). CPU by default.
    void set_device(Device device);

    Device device() const { return device_; }

    // The stream every kernel of run() is enqueued on: Stream::cpu(), or one CUDA stream per case.
    // The harness synchronises it before it reads outputs.
    Stream& stream();

    // An input on the run's device: `host` itself on the CPU, else a device copy made once per
    // set_device (kept, so in-place bench runs keep updating the same device tensor). The same
    // host buffer always maps to the same device tensor, so aliased inputs stay aliased.
    Tensor& in(const Tensor& host);

    Tensor* in(const Tensor* host) { return host != nullptr ? &in(*host) : nullptr; }

    // Guarded, NaN-poisoned output on the run's device (f32: NaN, integers: all bits set).
    Tensor make_output(const Shape& shape, DType dtype = DType::kF32);
    // A guarded output initialised with a copy of `init` (for in-place updates).
    Tensor make_output_like(const Tensor& init);
    // Empty string when every guard is intact, else which output was overrun.
    std::string check_guards() const;

    void clear_outputs();

    // Timing (bench_ops): each later run's outputs reuse the buffers of the run before (same
    // shapes, not re-poisoned), so a timed run is the op's own work, not allocations and
    // host-to-device copies of poison. Turn on only after the checked run.
    void reuse_outputs(bool on) { reuse_outputs_ = on; }

private:
    struct Guarded {
        Tensor buffer;
        size_t data_bytes;
    };

    struct Input {
        Tensor host;
        std::unique_ptr<Tensor> on_device;
    };

    std::vector<Guarded> guarded_;
    std::vector<Guarded> spare_;  // the previous run's outputs, when reuse_outputs is on
    bool reuse_outputs_ = false;
    Device device_ = Device::cpu();
    std::vector<Input> inputs_;
    std::unique_ptr<Stream> stream_;
};

using OpCaseFactory = std::function<std::vector<std::unique_ptr<OpCase>>()>;

// Each test/ops/cases_<op>.cpp registers its cases with one static RegisterOpCases.
struct RegisterOpCases {
    explicit RegisterOpCases(OpCaseFactory factory);
};

std::vector<std::unique_ptr<OpCase>> all_op_cases();

// One run of a case on a device from fresh inputs: make_inputs(seed), set_device, run, then the
// stream synchronised, the guards checked and every output read back as float64.
struct CaseRun {
    std::vector<std::vector<double>> outputs;
    std::string guards;  // empty when every guard is intact
};

CaseRun run_case(OpCase& c, Device device, uint64_t seed);

// Converts any tensor (f32, f16, bf16, i32, i64) to float64 values: all of them, or elements
// `index` of the flattened tensor.
std::vector<double> to_double(const Tensor& t);
std::vector<double> to_double(const Tensor& t, const std::vector<int64_t>& index);

// The values a check compares with `ref`: all of `got`, or its elements ref.index.
std::vector<float> checked_values(const std::vector<double>& got, const RefOutput& ref);

}  // namespace shardrec::test
