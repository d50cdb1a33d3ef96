// Backend-ops cases of the embedding table initialisation (kernels/embedding_init.h): every
// storage dtype, one row and one column, odd widths, a shard's row and column offsets, rows past
// 2^32 and tables of one row. The reference is the definition computed afresh from the whole
// rng::hash (not the backends' split prefix and suffix) and compared bit for bit, so the CPU and
// CUDA backends must write the same values. Listed cases write some rows only (with repeats) and
// must leave the others as they were. Bench: 262144 x 128 f32 rows (128 MiB; a larger block's
// float64 reference takes the host seconds); bytes = the values written.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/embedding_init.h"
#include "test/ops/op_case.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

struct InitVars {
    int64_t rows, cols;
    DType dtype;
    int64_t table, row_begin, col_begin, num_embeddings;
    bool bench = false;  // timed by bench_ops only
    int64_t listed = 0;  // > 0: only that many rows (which; random, repeats included) are written
};

// The value the rows hold before a listed fill (exact in every storage dtype).
constexpr float kBefore = 0.25f;

// The value rounded as the contract says: f64 -> f32 (nearest), then to the storage dtype.
double stored(double value, DType dtype) {
    const auto f = static_cast<float>(value);
    switch (dtype) {
        case DType::kF16:
            return half_to_float(float_to_half(f));
        case DType::kBF16:
            return bf16_to_float(float_to_bf16(f));
        default:
            return f;
    }
}

class EmbeddingInitCase : public OpCase {
public:
    explicit EmbeddingInitCase(InitVars v) : v_(v) {}

    OpKind kind() const override { return OpKind::kEmbeddingInit; }

    std::string vars() const override {
        return "dtype=" + std::string(dtype_name(v_.dtype)) + ",R=" + std::to_string(v_.rows) +
               ",C=" + std::to_string(v_.cols) + ",table=" + std::to_string(v_.table) +
               ",row_begin=" + std::to_string(v_.row_begin) +
               ",col_begin=" + std::to_string(v_.col_begin) +
               ",E=" + std::to_string(v_.num_embeddings) +
               (v_.listed > 0 ? ",listed=" + std::to_string(v_.listed) : "");
    }

    void make_inputs(uint64_t seed) override {
        seed_ = seed;
        if (v_.listed == 0)
            return;
        which_ = Tensor::empty({v_.listed}, DType::kI64);
        for (int64_t i = 0; i < v_.listed; ++i) {
            // Every third a repeat of the one before.
            which_.data<int64_t>()[i] =
                i % 3 == 2 ? which_.data<int64_t>()[i - 1]
                           : static_cast<int64_t>(rng::hash(seed, 17, static_cast<uint64_t>(i)) %
                                                  static_cast<uint64_t>(v_.rows));
        }
        before_ = Tensor::empty({v_.rows, v_.cols}, v_.dtype);
        visit_float_dtype(v_.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            std::fill(before_.data<T>(), before_.data<T>() + before_.numel(),
                      from_float<T>(kBefore));
        });
    }

    std::vector<RefOutput> reference() const override {
        const double bound = std::sqrt(1.0 / static_cast<double>(v_.num_embeddings));
        RefOutput out{"rows", {}, {}};
        std::vector<bool> written(static_cast<size_t>(v_.rows), v_.listed == 0);
        for (int64_t i = 0; i < v_.listed; ++i)
            written[static_cast<size_t>(which_.data<int64_t>()[i])] = true;
        for (int64_t r = 0; r < v_.rows; ++r) {
            for (int64_t c = 0; c < v_.cols; ++c) {
                if (!written[static_cast<size_t>(r)]) {
                    out.value.push_back(kBefore);
                    out.mag.push_back(kBefore);
                    continue;
                }
                const uint64_t bits =
                    rng::hash(seed_ ^ kernels::kEmbeddingInitSalt, static_cast<uint64_t>(v_.table),
                              static_cast<uint64_t>(v_.row_begin + r),
                              static_cast<uint64_t>(v_.col_begin + c));
                const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
                const double value = (2.0 * u - 1.0) * bound;
                out.value.push_back(stored(value, v_.dtype));
                out.mag.push_back(std::fabs(value));
            }
        }
        return {out};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor rows =
            v_.listed > 0 ? make_output_like(before_) : make_output({v_.rows, v_.cols}, v_.dtype);
        kernels::embedding_init(rows, seed_, v_.table, v_.row_begin, v_.col_begin,
                                v_.num_embeddings, stream(), v_.listed > 0 ? &in(which_) : nullptr);
        return {rows};
    }

    Tolerance tolerance(size_t /*output*/) const override {
        Tolerance t;
        t.exact = true;
        return t;
    }

    double bytes() const override {
        const int64_t rows = v_.listed > 0 ? v_.listed : v_.rows;
        return static_cast<double>(rows * v_.cols * static_cast<int64_t>(dtype_size(v_.dtype)));
    }

    bool bench_only() const override { return v_.bench; }

private:
    InitVars v_;
    uint64_t seed_ = 0;
    Tensor which_, before_;  // listed cases
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    const int64_t past_2_32 = (int64_t{1} << 32) + 12345;
    for (const InitVars& v : std::vector<InitVars>{
             {1, 1, DType::kF32, 0, 0, 0, 1},
             {7, 33, DType::kF32, 0, 0, 0, 7},
             {64, 128, DType::kF32, 3, 1000, 0, 40000000},
             {5, 16, DType::kF32, 25, past_2_32, 0, past_2_32 + 5},
             {37, 64, DType::kF32, 9, 0, 64, 37},  // a column shard's second half
             {65, 17, DType::kF16, 2, 3, 5, 100},
             {33, 130, DType::kBF16, 11, 7, 0, 3067956},
             {300, 8, DType::kF16, 1, 0, 0, 40000000},  // f16 subnormals
             {262144, 128, DType::kF32, 0, 0, 0, 40000000, true},
             // Listed rows only (managed collision's resets): a shard's offsets, odd widths.
             {50, 128, DType::kF32, 4, 1000, 0, 40000000, false, 20},
             {40, 37, DType::kF32, 2, 7, 64, 1000, false, 1},
             {33, 21, DType::kF16, 1, 0, 3, 33, false, 12},
             {30, 136, DType::kBF16, 6, 5, 0, 3067956, false, 30},
             {262144, 128, DType::kF32, 0, 0, 0, 40000000, true, 65536},
         })
        cases.push_back(std::make_unique<EmbeddingInitCase>(v));
    return cases;
});

}  // namespace
}  // namespace shardrec::test
