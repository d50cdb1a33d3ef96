// Backend-ops cases of the sequence embedding lookup (kernels/sequence_embedding.h): forward in
// every weight dtype, and the fused backward for every optimizer, hot rows and exact mode
// (inputs from embedding_inputs.h, shared with the pooled cases).
#include "kernels/sequence_embedding.h"
#include "test/ops/embedding_inputs.h"
#include "test/ops/op_case.h"
#include "test/reference/sequence_embedding.h"

namespace shardrec::test {
namespace {

using kernels::FusedOptimizerParams;
using kernels::OpKind;
using kernels::OptimType;

RefOutput ref_output(const char* name, ref::Values v) {
    return RefOutput{name, std::move(v.value), std::move(v.mag)};
}

EmbeddingInputSpec spec(std::vector<int64_t> rows,
                        std::vector<int32_t> features,
                        int64_t batch,
                        int64_t dim,
                        int64_t max_length,
                        DType dtype) {
    EmbeddingInputSpec s;
    s.table_rows = std::move(rows);
    s.feature_table = std::move(features);
    s.batch = batch;
    s.dim = dim;
    s.max_length = max_length;
    s.dtype = dtype;
    return s;
}

// ---- forward ----

class SequenceEmbeddingForwardCase : public OpCase {
public:
    explicit SequenceEmbeddingForwardCase(EmbeddingInputSpec spec) : spec_(std::move(spec)) {}

    OpKind kind() const override { return OpKind::kSequenceEmbeddingForward; }

    std::string vars() const override { return spec_.vars(); }

    void make_inputs(uint64_t seed) override { in_ = make_embedding_inputs(spec_, seed); }

    std::vector<RefOutput> reference() const override {
        return {
            ref_output("out", ref::sequence_embedding_forward(in_.lookup, to_double(in_.weights)))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({in_.ids.numel(), spec_.dim});
        kernels::sequence_embedding_forward(in(in_.weights), in(in_.table_offsets),
                                            in(in_.feature_table), in(in_.ids), in(in_.offsets),
                                            out, stream());
        return {out};
    }

    // A gather with an exact upcast: bitwise equality.
    Tolerance tolerance(size_t /*output*/) const override {
        Tolerance t;
        t.exact = true;
        return t;
    }

    // Reads N rows of D * sizeof(W) and 8N of ids, writes [N, D] f32.
    double bytes() const override {
        const auto n = static_cast<double>(in_.ids.numel());
        const auto d = static_cast<double>(spec_.dim);
        return n * (d * static_cast<double>(dtype_size(spec_.dtype)) + 8 + 4 * d);
    }

private:
    EmbeddingInputSpec spec_;
    EmbeddingInputs in_;
};

// ---- fused backward ----

class SequenceEmbeddingBackwardFusedCase : public OpCase {
public:
    SequenceEmbeddingBackwardFusedCase(EmbeddingInputSpec spec, FusedOptimizerParams optim)
        : spec_(std::move(spec)), optim_(optim) {}

    OpKind kind() const override { return OpKind::kSequenceEmbeddingBackwardFused; }

    std::string vars() const override {
        return fmt::format("{},opt={},lr={},wd={}", spec_.vars(), optim_type_name(optim_.type),
                           optim_.learning_rate, optim_.weight_decay);
    }

    void make_inputs(uint64_t seed) override {
        in_ = make_embedding_inputs(spec_, seed);
        grad_out_ = random_tensor({in_.ids.numel(), spec_.dim}, DType::kF32, seed, 3, spec_.exact,
                                  -1.f, 1.f);
        const int64_t rows = in_.weights.size(0);
        state1_ = state2_ = Tensor();
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
        const ref::RowGradients g =
            ref::sequence_embedding_row_gradients(in_.lookup, to_double(grad_out_));
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

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor w = make_output_like(in_.weights);
        Tensor s1 = state1_.defined() ? make_output_like(state1_) : Tensor();
        Tensor s2 = state2_.defined() ? make_output_like(state2_) : Tensor();
        kernels::sequence_embedding_backward_fused(
            in(grad_out_), in(in_.table_offsets), in(in_.feature_table), in(in_.ids),
            in(in_.offsets), optim_, w, s1.defined() ? &s1 : nullptr, s2.defined() ? &s2 : nullptr,
            workspace_, stream());
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
        Tolerance t = OpCase::tolerance(output);
        t.exact = spec_.exact;
        return output == 0 ? stored_row_tolerance(t, spec_.dtype) : t;
    }

    // As the pooled fused backward: K ids on the hottest row, 8 roundings in the update rule,
    // D more for the row-wise mean (ref::fused_optimizer_update derives the mags).
    int64_t terms(size_t /*output*/) const override {
        return in_.max_row_count + 8 +
               (optim_.type == OptimType::kExactRowWiseAdagrad ? spec_.dim : 0);
    }

    // Reads one grad row (4D) and 8 bytes of ids per id; reads and writes the U touched rows
    // and their state.
    double bytes() const override {
        const auto n = static_cast<double>(in_.ids.numel());
        const auto d = static_cast<double>(spec_.dim);
        const double state_floats = optim_.type == OptimType::kSgd                   ? 0
                                    : optim_.type == OptimType::kExactRowWiseAdagrad ? 1
                                    : optim_.type == OptimType::kAdam                ? 2 * d
                                                                                     : d;
        return n * (4 * d + 8) +
               2 * static_cast<double>(in_.touched_rows) *
                   (d * static_cast<double>(dtype_size(spec_.dtype)) + 4 * state_floats);
    }

private:
    EmbeddingInputSpec spec_;
    FusedOptimizerParams optim_;
    EmbeddingInputs in_;
    Tensor grad_out_, state1_, state2_;
    kernels::EmbeddingBackwardWorkspace workspace_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> v;
    v.push_back(
        std::make_unique<SequenceEmbeddingForwardCase>(spec({5}, {0}, 1, 1, 3, DType::kF32)));
    v.push_back(std::make_unique<SequenceEmbeddingForwardCase>(
        spec({10, 6}, {0, 1, 0}, 7, 3, 5, DType::kF32)));
    v.push_back(std::make_unique<SequenceEmbeddingForwardCase>(
        spec({50, 20, 7, 100}, {0, 1, 2, 3}, 64, 33, 20, DType::kF16)));
    v.push_back(std::make_unique<SequenceEmbeddingForwardCase>(
        spec({30, 40}, {1, 0, 1}, 64, 128, 8, DType::kBF16)));
    for (OptimType type : {OptimType::kSgd, OptimType::kExactAdagrad,
                           OptimType::kExactRowWiseAdagrad, OptimType::kAdam}) {
        FusedOptimizerParams o;
        o.type = type;
        o.learning_rate = type == OptimType::kSgd ? 0.1f : 0.01f;
        o.step = 2;
        EmbeddingInputSpec hot = spec({50, 20}, {0, 1, 0}, 64, 33, 4, DType::kF32);
        hot.hot_row = true;
        v.push_back(std::make_unique<SequenceEmbeddingBackwardFusedCase>(hot, o));
        o.weight_decay = 0.01f;
        v.push_back(std::make_unique<SequenceEmbeddingBackwardFusedCase>(
            spec({10, 6, 30}, {0, 1, 2}, 7, 128, 6, DType::kBF16), o));
    }
    EmbeddingInputSpec exact = spec({16, 16}, {0, 1, 0}, 64, 33, 10, DType::kF32);
    exact.exact = true;
    exact.hot_row = true;
    FusedOptimizerParams sgd;
    sgd.learning_rate = 0.25f;
    v.push_back(std::make_unique<SequenceEmbeddingBackwardFusedCase>(exact, sgd));
    return v;
});

}  // namespace
}  // namespace shardrec::test
