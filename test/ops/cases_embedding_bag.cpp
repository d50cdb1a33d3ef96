// Backend-ops cases of the pooled embedding lookup (kernels/embedding_bag.h): forward, dense
// backward (with the per-sample-weight gradient) and fused backward for every optimizer, over
// FBGEMM's property space (embedding_inputs.h), plus large bench-only cases for bench_ops. The
// GPU-sized cases' references cover the rows the lookup touches (and a sample of the others),
// not the whole 2 GiB table.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/embedding_bag.h"
#include "test/ops/embedding_inputs.h"
#include "test/ops/op_case.h"

namespace shardrec::test {
namespace {

using kernels::FusedOptimizerParams;
using kernels::OpKind;
using kernels::OptimType;

Tolerance exact_tolerance() {
    Tolerance t;
    t.exact = true;
    return t;
}

RefOutput ref_output(const char* name, ref::Values v) {
    return RefOutput{name, std::move(v.value), std::move(v.mag)};
}

// A lookup rewritten onto the rows it touches, as one table of those rows (ascending): its
// float64 reference converts and updates only them, with the same sums in the same order.
struct TouchedRows {
    std::vector<int64_t> rows;    // [U] rows of the whole table, ascending
    ref::EmbeddingLookup lookup;  // one table of U rows; ids index `rows`
};

TouchedRows touched_rows(const ref::EmbeddingLookup& a) {
    const int64_t batch = a.batch();
    std::vector<int64_t> global(a.ids.size());
    for (size_t j = 0; j + 1 < a.offsets.size(); ++j) {
        const auto f = static_cast<int64_t>(j) / batch;
        for (int64_t n = a.offsets[j]; n < a.offsets[j + 1]; ++n) {
            global[static_cast<size_t>(n)] = a.row_of(n, f);
        }
    }
    TouchedRows t;
    t.rows = global;
    std::sort(t.rows.begin(), t.rows.end());
    t.rows.erase(std::unique(t.rows.begin(), t.rows.end()), t.rows.end());
    t.lookup = a;
    t.lookup.table_offsets = {0, static_cast<int64_t>(t.rows.size())};
    t.lookup.feature_table.assign(a.feature_table.size(), 0);
    for (size_t n = 0; n < global.size(); ++n) {
        t.lookup.ids[n] =
            std::lower_bound(t.rows.begin(), t.rows.end(), global[n]) - t.rows.begin();
    }
    return t;
}

// The elements of rows `rows` of a row-major [R, width] tensor.
std::vector<int64_t> row_elements(const std::vector<int64_t>& rows, int64_t width) {
    std::vector<int64_t> out;
    out.reserve(rows.size() * static_cast<size_t>(width));
    for (const int64_t r : rows) {
        for (int64_t c = 0; c < width; ++c) {
            out.push_back(r * width + c);
        }
    }
    return out;
}

// Every `stride`-th row of [0, num_rows) that `touched` (ascending) does not hold.
std::vector<int64_t> untouched_sample(int64_t num_rows,
                                      const std::vector<int64_t>& touched,
                                      int64_t stride) {
    std::vector<int64_t> out;
    for (int64_t r = 0; r < num_rows; r += stride) {
        if (!std::binary_search(touched.begin(), touched.end(), r)) {
            out.push_back(r);
        }
    }
    return out;
}

// ---- forward ----

// The weights' rows: D * sizeof(W) bytes each, from all the tables together.
OpCase::RandomRows table_rows(const EmbeddingInputSpec& spec) {
    int64_t rows = 0;
    for (int64_t e : spec.table_rows)
        rows += e;
    const int64_t row_bytes = spec.dim * static_cast<int64_t>(dtype_size(spec.dtype));
    return {row_bytes, static_cast<size_t>(rows * row_bytes)};
}

class EmbeddingBagForwardCase : public OpCase {
public:
    EmbeddingBagForwardCase(EmbeddingInputSpec spec, PoolingMode mode, bool large_bench = false)
        : spec_(std::move(spec)), mode_(mode), large_bench_(large_bench) {}

    OpKind kind() const override { return OpKind::kEmbeddingBagForward; }

    std::string vars() const override { return spec_.vars() + ",mode=" + pooling_mode_name(mode_); }

    bool bench_only() const override { return large_bench_; }

    bool large_bench() const override { return large_bench_; }

    void make_inputs(uint64_t seed) override {
        in_ = make_embedding_inputs(spec_, seed);
        if (large_bench_) {
            // NaN-poisoned as make_output does, so the first (checked) run still catches
            // unwritten elements.
            bench_out_ =
                Tensor::empty({spec_.batch, in_.feature_table.numel() * spec_.dim}, DType::kF32);
            std::memset(bench_out_.data_ptr(), 0xFF, bench_out_.nbytes());
        }
    }

    std::vector<RefOutput> reference() const override {
        if (large_bench_) {
            const TouchedRows t = touched_rows(in_.lookup);
            return {ref_output(
                "out",
                ref::embedding_bag_forward(
                    t.lookup, to_double(in_.weights, row_elements(t.rows, spec_.dim)), mode_))};
        }
        return {ref_output("out",
                           ref::embedding_bag_forward(in_.lookup, to_double(in_.weights), mode_))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        // Bench cases reuse one output: a fresh guarded buffer per run would time page faults.
        const int64_t num_features = in_.feature_table.numel();
        Tensor out =
            large_bench_ ? in(bench_out_) : make_output({spec_.batch, num_features * spec_.dim});
        kernels::embedding_bag_forward(in(in_.weights), in(in_.table_offsets),
                                       in(in_.feature_table), in(in_.ids), in(in_.offsets),
                                       in(in_.psw()), mode_, out, stream());
        return {out};
    }

    // K = the longest bag (one rounding per product-and-add), + 1 for the MEAN division.
    Tolerance tolerance(size_t output) const override {
        return spec_.exact ? exact_tolerance() : OpCase::tolerance(output);
    }

    int64_t terms(size_t /*output*/) const override { return in_.max_length + 1; }

    RandomRows random_rows() const override { return table_rows(spec_); }

    // Reads N rows of D * sizeof(W), 8N of ids (+4N weights), 8(F*B+1) of offsets; writes the
    // [B, F*D] f32 output.
    double bytes() const override {
        const auto n = static_cast<double>(in_.ids.numel());
        const auto bags = static_cast<double>(in_.offsets.numel());
        return n * static_cast<double>(spec_.dim * dtype_size(spec_.dtype)) + 8 * n +
               (spec_.weighted ? 4 * n : 0) + 8 * bags + 4.0 * (bags - 1) * spec_.dim;
    }

private:
    EmbeddingInputSpec spec_;
    PoolingMode mode_;
    bool large_bench_;
    EmbeddingInputs in_;
    Tensor bench_out_;
};

// ---- dense backward ----

class EmbeddingBagBackwardCase : public OpCase {
public:
    EmbeddingBagBackwardCase(EmbeddingInputSpec spec, PoolingMode mode, bool psw_grad)
        : spec_(std::move(spec)), mode_(mode), psw_grad_(psw_grad) {}

    OpKind kind() const override { return OpKind::kEmbeddingBagBackward; }

    std::string vars() const override {
        return spec_.vars() + ",mode=" + pooling_mode_name(mode_) + (psw_grad_ ? ",grad_w" : "");
    }

    void make_inputs(uint64_t seed) override {
        in_ = make_embedding_inputs(spec_, seed);
        grad_out_ = random_tensor({spec_.batch, in_.feature_table.numel() * spec_.dim}, DType::kF32,
                                  seed, 3, spec_.exact, -1.f, 1.f);
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<double> g = to_double(grad_out_);
        std::vector<RefOutput> out{
            ref_output("grad_weights", ref::embedding_bag_backward(in_.lookup, g, mode_))};
        if (psw_grad_) {
            out.push_back(ref_output("grad_per_sample_weights",
                                     ref::embedding_bag_backward_per_sample_weights(
                                         in_.lookup, to_double(in_.weights), g, mode_)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor grad_weights = make_output(in_.weights.shape());
        Tensor grad_psw = psw_grad_ ? make_output({in_.ids.numel()}) : Tensor();
        kernels::embedding_bag_backward(in(grad_out_), in(in_.weights), in(in_.table_offsets),
                                        in(in_.feature_table), in(in_.ids), in(in_.offsets),
                                        in(in_.psw()), mode_, &grad_weights,
                                        psw_grad_ ? &grad_psw : nullptr, workspace_, stream());
        if (!psw_grad_) {
            return {grad_weights};
        }
        return {grad_weights, grad_psw};
    }

    Tolerance tolerance(size_t output) const override {
        return spec_.exact ? exact_tolerance() : OpCase::tolerance(output);
    }

    // grad_weights: K = most ids on one row, + 2 for the scale w / L; grad_psw: a D-term dot, /L.
    int64_t terms(size_t output) const override {
        return output == 0 ? in_.max_row_count + 2 : spec_.dim + 1;
    }

    // Reads grad_out once (4*B*F*D: a bag's grad row serves its L ids from cache), 8N of ids
    // (+4N weights) and 8(F*B+1) of offsets; writes the whole [sum E, D] f32 gradient. The
    // per-sample-weight gradient adds N rows of W read and 4N written.
    double bytes() const override {
        const auto n = static_cast<double>(in_.ids.numel());
        const auto d = static_cast<double>(spec_.dim);
        double b = 4.0 * static_cast<double>(grad_out_.numel()) + 8 * n +
                   (spec_.weighted ? 4 * n : 0) + 8.0 * static_cast<double>(in_.offsets.numel()) +
                   4.0 * static_cast<double>(in_.weights.numel());
        if (psw_grad_) {
            b += n * (d * static_cast<double>(dtype_size(spec_.dtype)) + 4);
        }
        return b;
    }

private:
    EmbeddingInputSpec spec_;
    PoolingMode mode_;
    bool psw_grad_;
    EmbeddingInputs in_;
    Tensor grad_out_;
    kernels::EmbeddingBackwardWorkspace workspace_;
};

// ---- fused backward ----

class EmbeddingBagBackwardFusedCase : public OpCase {
public:
    EmbeddingBagBackwardFusedCase(EmbeddingInputSpec spec,
                                  PoolingMode mode,
                                  FusedOptimizerParams optim,
                                  bool large_bench = false)
        : spec_(std::move(spec)), mode_(mode), optim_(optim), large_bench_(large_bench) {}

    OpKind kind() const override { return OpKind::kEmbeddingBagBackwardFused; }

    std::string vars() const override {
        return fmt::format("{},mode={},opt={},lr={},wd={}", spec_.vars(), pooling_mode_name(mode_),
                           optim_type_name(optim_.type), optim_.learning_rate, optim_.weight_decay);
    }

    bool bench_only() const override { return large_bench_; }

    bool large_bench() const override { return large_bench_; }

    RandomRows random_rows() const override { return table_rows(spec_); }

    void make_inputs(uint64_t seed) override {
        in_ = make_embedding_inputs(spec_, seed);
        grad_out_ = random_tensor({spec_.batch, in_.feature_table.numel() * spec_.dim}, DType::kF32,
                                  seed, 3, spec_.exact, -1.f, 1.f);
        const int64_t rows = in_.weights.size(0);
        state1_ = state2_ = Tensor();
        // Adagrad sums start positive; Adam moments small, v >= 0.
        if (optim_.type == OptimType::kExactRowWiseAdagrad) {
            state1_ = random_tensor({rows}, DType::kF32, seed, 4, false, 0.f, 1.f);
        } else if (optim_.type == OptimType::kExactAdagrad) {
            state1_ = random_tensor({rows, spec_.dim}, DType::kF32, seed, 4, false, 0.f, 1.f);
        } else if (optim_.type == OptimType::kAdam) {
            state1_ = random_tensor({rows, spec_.dim}, DType::kF32, seed, 4, false, -0.1f, 0.1f);
            state2_ = random_tensor({rows, spec_.dim}, DType::kF32, seed, 5, false, 0.f, 0.01f);
        }
    }

    std::vector<RefOutput> reference() const override {
        if (large_bench_) {
            return touched_reference();
        }
        const ref::RowGradients g =
            ref::embedding_bag_row_gradients(in_.lookup, to_double(grad_out_), mode_);
        const auto state = [](const Tensor& t) {
            return t.defined() ? to_double(t) : std::vector<double>{};
        };
        ref::OptimizerUpdate u = ref::fused_optimizer_update(
            g, optim_, spec_.dim, to_double(in_.weights), state(state1_), state(state2_));
        std::vector<RefOutput> out{ref_output("weights", std::move(u.weights))};
        if (state1_.defined()) {
            out.push_back(ref_output("state1", std::move(u.state1)));
        }
        if (state2_.defined()) {
            out.push_back(ref_output("state2", std::move(u.state2)));
        }
        return out;
    }

    // The update is in place. Test cases update guarded copies of the initial tensors; bench
    // cases update the inputs themselves (a 512 MiB copy per run would swamp the timing), so
    // only their first run after make_inputs is checked, as bench_ops does.
    std::vector<Tensor> run(Device /*device*/) override {
        Tensor w = large_bench_ ? in(in_.weights) : make_output_like(in_.weights);
        Tensor s1 =
            state1_.defined() ? (large_bench_ ? in(state1_) : make_output_like(state1_)) : Tensor();
        Tensor s2 =
            state2_.defined() ? (large_bench_ ? in(state2_) : make_output_like(state2_)) : Tensor();
        kernels::embedding_bag_backward_fused(
            in(grad_out_), in(in_.table_offsets), in(in_.feature_table), in(in_.ids),
            in(in_.offsets), in(in_.psw()), mode_, optim_, w, s1.defined() ? &s1 : nullptr,
            s2.defined() ? &s2 : nullptr, workspace_, stream());
        std::vector<Tensor> out{w};
        if (s1.defined()) {
            out.push_back(s1);
        }
        if (s2.defined()) {
            out.push_back(s2);
        }
        return out;
    }

    Tolerance tolerance(size_t output) const override {
        if (spec_.exact) {
            return exact_tolerance();
        }
        const Tolerance t = OpCase::tolerance(output);
        return output == 0 ? stored_row_tolerance(t, spec_.dtype) : t;
    }

    // K ids on the hottest row (+2 for the scale w / L), then at most 8 roundings in the update
    // rule (ref::fused_optimizer_update derives how they reach each output); the row-wise mean
    // over D adds D.
    int64_t terms(size_t /*output*/) const override {
        return in_.max_row_count + 2 + 8 +
               (optim_.type == OptimType::kExactRowWiseAdagrad ? spec_.dim : 0);
    }

    // Reads grad_out once (4*B*F*D: a bag's grad row serves its L ids from cache), 8N of ids
    // (+4N weights) and 8(F*B+1) of offsets; reads and writes each of the U touched rows
    // (D * sizeof(W)) and its state (4 bytes per state float).
    double bytes() const override {
        const auto n = static_cast<double>(in_.ids.numel());
        const auto d = static_cast<double>(spec_.dim);
        const auto u = static_cast<double>(in_.touched_rows);
        double state_floats = 0;
        if (optim_.type == OptimType::kExactRowWiseAdagrad) {
            state_floats = 1;
        }
        if (optim_.type == OptimType::kExactAdagrad) {
            state_floats = d;
        }
        if (optim_.type == OptimType::kAdam) {
            state_floats = 2 * d;
        }
        return 4.0 * static_cast<double>(grad_out_.numel()) + 8 * n + (spec_.weighted ? 4 * n : 0) +
               8.0 * static_cast<double>(in_.offsets.numel()) +
               2 * u * (d * static_cast<double>(dtype_size(spec_.dtype)) + 4 * state_floats);
    }

private:
    // The reference of the rows the lookup touches, and a sample of the other rows (every 997th),
    // which must keep their values.
    std::vector<RefOutput> touched_reference() const {
        const TouchedRows t = touched_rows(in_.lookup);
        const int64_t rows = in_.weights.size(0);
        const auto gathered = [&](const Tensor& x) {
            return x.defined() ? to_double(x, row_elements(t.rows, x.numel() / rows))
                               : std::vector<double>{};
        };
        const ref::RowGradients g =
            ref::embedding_bag_row_gradients(t.lookup, to_double(grad_out_), mode_);
        ref::OptimizerUpdate u = ref::fused_optimizer_update(
            g, optim_, spec_.dim, gathered(in_.weights), gathered(state1_), gathered(state2_));
        const std::vector<int64_t> sample = untouched_sample(rows, t.rows, 997);
        const auto output = [&](const char* name, ref::Values v, const Tensor& x) {
            const int64_t width = x.numel() / rows;
            RefOutput o{name, std::move(v.value), std::move(v.mag), row_elements(t.rows, width)};
            const std::vector<int64_t> kept = row_elements(sample, width);
            for (const double before : to_double(x, kept)) {
                o.value.push_back(before);
                o.mag.push_back(std::fabs(before));
            }
            o.index.insert(o.index.end(), kept.begin(), kept.end());
            return o;
        };
        std::vector<RefOutput> out{output("weights", std::move(u.weights), in_.weights)};
        if (state1_.defined()) {
            out.push_back(output("state1", std::move(u.state1), state1_));
        }
        if (state2_.defined()) {
            out.push_back(output("state2", std::move(u.state2), state2_));
        }
        return out;
    }

    EmbeddingInputSpec spec_;
    PoolingMode mode_;
    FusedOptimizerParams optim_;
    bool large_bench_;
    EmbeddingInputs in_;
    Tensor grad_out_, state1_, state2_;
    kernels::EmbeddingBackwardWorkspace workspace_;
};

// ---- the cases ----

EmbeddingInputSpec spec(std::vector<int64_t> rows,
                        std::vector<int32_t> features,
                        int64_t batch,
                        int64_t dim,
                        int64_t max_length,
                        bool weighted,
                        DType dtype) {
    EmbeddingInputSpec s;
    s.table_rows = std::move(rows);
    s.feature_table = std::move(features);
    s.batch = batch;
    s.dim = dim;
    s.max_length = max_length;
    s.weighted = weighted;
    s.dtype = dtype;
    return s;
}

FusedOptimizerParams optimizer(OptimType type, float lr, float weight_decay = 0.f) {
    FusedOptimizerParams o;
    o.type = type;
    o.learning_rate = lr;
    o.weight_decay = weight_decay;
    o.step = type == OptimType::kAdam ? 3 : 1;  // exercises the bias correction
    return o;
}

// The bench's table: MLPerf DLRM-DCNv2 shapes scaled to one device: one 4M-row, D = 128 table
// (2 GiB in f32; the float64 reference needs only the rows the ids touch) shared by 4 features,
// B = 8192, L = 20 per bag (655k ids, 335 MB of rows: every row read goes to DRAM or HBM, past a
// CPU's L3 and an H100's 50 MB L2, whereas a batch of 2048 x 20 ids would sit in either).
EmbeddingInputSpec large_bench_spec(DType dtype) {
    EmbeddingInputSpec s = spec({int64_t{4} << 20}, {0, 0, 0, 0}, 8192, 128, 20, false, dtype);
    s.min_length = 20;
    return s;
}

// The bench with the pooling of the MLPerf DLRM-DCNv2 config (configs/dlrm_dcnv2_mlperf.yaml):
// its 26 features, each bag of feature f holding that feature's pooling factor of ids (214 per
// sample, 1.48M ids), all on one 4M-row D = 128 table, B = 6912 as the config's per-rank batch.
EmbeddingInputSpec mlperf_pooling_spec(DType dtype) {
    const std::vector<int64_t> pooling = {3, 2, 1, 2, 6, 1, 1,  1,   1,  7,  3, 8, 1,
                                          6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
    EmbeddingInputSpec s = spec({int64_t{4} << 20}, std::vector<int32_t>(pooling.size(), 0), 6912,
                                128, 0, false, dtype);
    s.lengths = pooling;
    return s;
}

void add_forward_cases(std::vector<std::unique_ptr<OpCase>>& v) {
    constexpr auto kSum = PoolingMode::kSum;
    constexpr auto kMean = PoolingMode::kMean;
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(
        spec({5}, {0}, 1, 1, 3, false, DType::kF32), kSum));
    // Every (dtype, pooling, weighted) at T=2 with table 0 shared by features 0 and 2, D=33.
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        for (PoolingMode mode : {kSum, kMean}) {
            for (bool weighted : {false, true}) {
                v.push_back(std::make_unique<EmbeddingBagForwardCase>(
                    spec({10, 6}, {0, 1, 0}, 7, 33, 5, weighted, dtype), mode));
            }
        }
    }
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(
        spec({50, 20, 7, 100}, {0, 1, 2, 3}, 64, 128, 20, true, DType::kF32), kMean));
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(
        spec({30, 40, 9}, {2, 0, 1, 0}, 64, 3, 12, false, DType::kBF16), kSum));
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(
        spec({8}, {0}, 7, 4, 0, false, DType::kF32), kMean));  // every bag empty
    EmbeddingInputSpec exact = spec({16, 16}, {0, 1}, 64, 33, 20, true, DType::kF32);
    exact.exact = true;
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(exact, kSum));
    // D beyond one pass of a warp's 16-byte loads (CUDA: 32 lanes x 8 f16 = 256 columns).
    v.push_back(std::make_unique<EmbeddingBagForwardCase>(
        spec({30, 40}, {0, 1}, 16, 272, 6, true, DType::kF16), kMean));
    for (DType dtype : {DType::kF32, DType::kF16}) {
        v.push_back(std::make_unique<EmbeddingBagForwardCase>(large_bench_spec(dtype), kSum, true));
    }
    v.push_back(
        std::make_unique<EmbeddingBagForwardCase>(mlperf_pooling_spec(DType::kF32), kSum, true));
}

// Two tables with a hot row of about 320 and 640 ids (a shared table), D = 200 (CUDA: several hot
// rows of several chunks each, claimed in any order, each chunk's sum over two column blocks).
EmbeddingInputSpec hot_rows_in_chunks() {
    EmbeddingInputSpec s = spec({60, 50}, {0, 1, 1}, 400, 200, 4, true, DType::kF32);
    s.hot_row = true;
    return s;
}

void add_backward_cases(std::vector<std::unique_ptr<OpCase>>& v) {
    constexpr auto kSum = PoolingMode::kSum;
    constexpr auto kMean = PoolingMode::kMean;
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(
        spec({5}, {0}, 1, 1, 3, false, DType::kF32), kSum, false));
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(
        spec({10, 6}, {0, 1, 0}, 7, 3, 5, true, DType::kF32), kMean, true));
    EmbeddingInputSpec hot = spec({50, 20, 7, 100}, {0, 1, 2, 3}, 64, 33, 4, true, DType::kBF16);
    hot.hot_row = true;
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(hot, kSum, true));
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(
        spec({30, 40}, {1, 0, 1}, 64, 128, 8, false, DType::kF16), kMean, true));
    // D beyond one 128-column chunk, a hot row beyond one warp's share (CUDA: block per row).
    EmbeddingInputSpec wide = spec({20}, {0, 0}, 32, 200, 5, true, DType::kF32);
    wide.hot_row = true;
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(wide, kSum, false));
    EmbeddingInputSpec exact = spec({16, 16}, {0, 1, 0}, 7, 33, 10, true, DType::kF32);
    exact.exact = true;
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(exact, kSum, true));
    // A hot row of 600 ids (CUDA: three chunks of at most 256, the last partial).
    EmbeddingInputSpec chunked = spec({60}, {0, 0, 0}, 200, 40, 4, true, DType::kF32);
    chunked.hot_row = true;
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(chunked, kSum, true));
    v.push_back(std::make_unique<EmbeddingBagBackwardCase>(hot_rows_in_chunks(), kSum, false));
}

void add_backward_fused_cases(std::vector<std::unique_ptr<OpCase>>& v) {
    constexpr auto kSum = PoolingMode::kSum;
    constexpr auto kMean = PoolingMode::kMean;
    for (OptimType type : {OptimType::kSgd, OptimType::kExactAdagrad,
                           OptimType::kExactRowWiseAdagrad, OptimType::kAdam}) {
        const float lr = type == OptimType::kSgd ? 0.1f : 0.01f;
        EmbeddingInputSpec hot = spec({50, 20}, {0, 1, 0}, 64, 33, 4, true, DType::kF32);
        hot.hot_row = true;
        v.push_back(
            std::make_unique<EmbeddingBagBackwardFusedCase>(hot, kMean, optimizer(type, lr)));
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
            spec({10, 6, 30}, {0, 1, 2}, 7, 128, 6, false, DType::kF16), kSum,
            optimizer(type, lr, 0.01f)));
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
            spec({40}, {0, 0}, 7, 3, 5, true, DType::kBF16), kSum, optimizer(type, lr)));
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
            spec({5}, {0}, 1, 1, 3, false, DType::kF32), kSum, optimizer(type, lr)));
        // f32 rows of 4k columns (CUDA: 16-byte loads), D=64 leaving half the lanes idle, D=128
        // with a hot row.
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
            spec({30, 12}, {0, 1, 0}, 16, 64, 6, true, DType::kF32), kMean,
            optimizer(type, lr, 0.01f)));
        EmbeddingInputSpec full = spec({40, 9}, {1, 0}, 40, 128, 7, false, DType::kF32);
        full.hot_row = true;
        v.push_back(
            std::make_unique<EmbeddingBagBackwardFusedCase>(full, kSum, optimizer(type, lr)));
        // A hot row of 600 ids (CUDA: three chunks of at most 256, the last partial).
        EmbeddingInputSpec chunked = spec({60}, {0, 0, 0}, 200, 40, 4, true, DType::kF32);
        chunked.hot_row = true;
        v.push_back(
            std::make_unique<EmbeddingBagBackwardFusedCase>(chunked, kMean, optimizer(type, lr)));
        // D beyond one 128-column chunk, with a hot row (CUDA: the multi-chunk paths of the
        // warp-per-row and block-per-row updates).
        EmbeddingInputSpec wide = spec({20}, {0, 0}, 32, 200, 5, true, DType::kBF16);
        wide.hot_row = true;
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(wide, kMean,
                                                                    optimizer(type, lr, 0.01f)));
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(hot_rows_in_chunks(), kSum,
                                                                    optimizer(type, lr)));
    }
    // Exact mode: integer rows and grads, lr 1/4: every update is exact in fp32.
    EmbeddingInputSpec exact = spec({16, 16}, {0, 1, 0}, 64, 33, 10, true, DType::kF32);
    exact.exact = true;
    exact.hot_row = true;
    v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(exact, kSum,
                                                                optimizer(OptimType::kSgd, 0.25f)));
    for (DType dtype : {DType::kF32, DType::kF16}) {
        v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
            large_bench_spec(dtype), kSum, optimizer(OptimType::kExactRowWiseAdagrad, 0.01f),
            true));
    }
    v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
        mlperf_pooling_spec(DType::kF32), kSum, optimizer(OptimType::kExactRowWiseAdagrad, 0.01f),
        true));
    // The same ids Zipf-skewed as the synthetic data's (data.zipf_alpha 1.05): a few rows take
    // thousands of ids each, as in click logs.
    EmbeddingInputSpec zipf = mlperf_pooling_spec(DType::kF32);
    zipf.zipf_alpha = 1.05;
    v.push_back(std::make_unique<EmbeddingBagBackwardFusedCase>(
        zipf, kSum, optimizer(OptimType::kExactRowWiseAdagrad, 0.01f), true));
}

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> v;
    add_forward_cases(v);
    add_backward_cases(v);
    add_backward_fused_cases(v);
    return v;
});

}  // namespace
}  // namespace shardrec::test
