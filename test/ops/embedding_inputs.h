// Inputs of the embedding op cases (cases_embedding_bag.cpp, cases_sequence_embedding.cpp): a
// table-batched lookup generated from (seed, index) in the tested weight dtype, with the same
// values as the plain vectors the float64 reference consumes. Covers FBGEMM's property space:
// several tables, a table shared by two features, L = 0 bags, ids at 0 and E-1, a hot row
// repeated across the batch, weighted features, and integer-valued "exact mode" data.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "test/reference/embedding_bag.h"
#include "test/support/compare.h"

namespace shardrec::test {

struct EmbeddingInputSpec {
    std::vector<int64_t> table_rows;     // E_t per table
    std::vector<int32_t> feature_table;  // table of each feature
    int64_t batch = 1;
    int64_t dim = 1;
    int64_t min_length = 0;
    int64_t max_length = 4;
    // When set: every bag of feature f holds lengths[f] ids (min/max_length unused), as a
    // config's fixed pooling factors.
    std::vector<int64_t> lengths;
    bool weighted = false;
    DType dtype = DType::kF32;
    bool hot_row = false;  // every bag's first id is the same row of its table
    bool exact = false;    // small integers everywhere: fp32 sums are exact in any order
    // > 0: ids Zipf-distributed with this exponent (rank k with probability ~ k^-zipf_alpha), the
    // ranks scattered over the rows, as the synthetic data and real click logs are skewed.
    double zipf_alpha = 0;

    std::string vars() const {
        const bool shared = std::any_of(feature_table.begin(), feature_table.end(), [&](int32_t t) {
            return std::count(feature_table.begin(), feature_table.end(), t) > 1;
        });
        int64_t sum_lengths = 0;
        for (int64_t l : lengths)
            sum_lengths += l;
        const std::string l = lengths.empty() ? fmt::format("{}..{}", min_length, max_length)
                                              : fmt::format("per-feature(sum {})", sum_lengths);
        return fmt::format("T={},F={}{},E={},B={},D={},L={},w={},{}{}{}{}", table_rows.size(),
                           feature_table.size(), shared ? "(shared)" : "", table_rows[0], batch,
                           dim, l, weighted ? 1 : 0, dtype_name(dtype), hot_row ? ",hot" : "",
                           exact ? ",exact" : "",
                           zipf_alpha > 0 ? fmt::format(",zipf={}", zipf_alpha) : "");
    }
};

// The rounding of an updated row stored as `dtype`: (1 + u_out) relative, and for f16 up to half
// its subnormal step (2^-24) absolute, which no relative bound covers near zero (bf16's and
// f32's subnormal steps are below any value the cases compare).
inline Tolerance stored_row_tolerance(Tolerance t, DType dtype) {
    switch (dtype) {
        case DType::kF16:
            t.u_out = 0x1.0p-11;
            t.atol += 0x1.0p-25;
            break;
        case DType::kBF16:
            t.u_out = 0x1.0p-8;
            break;
        default:
            t.u_out = 0x1.0p-24;
    }
    return t;
}

// Uniform value for element i of stream `stream`: in [lo, hi), or an integer in [lo, hi] when
// exact. Rounded to the storage dtype by the caller, and read back from there by the reference.
inline float random_value(
    uint64_t seed, uint64_t stream, int64_t i, bool exact, float lo, float hi) {
    const double u = rng::uniform(seed, stream, static_cast<uint64_t>(i));
    if (exact) {
        return std::floor(lo + static_cast<float>(u) * (hi - lo + 1.f));
    }
    return lo + static_cast<float>(u) * (hi - lo);
}

// A [rows, cols] tensor of `dtype` filled with random_value.
inline Tensor random_tensor(const Shape& shape,
                            DType dtype,
                            uint64_t seed,
                            uint64_t stream,
                            bool exact,
                            float lo,
                            float hi) {
    Tensor t = Tensor::empty(shape, dtype);
    visit_float_dtype(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = t.data<T>();
        const int64_t n = t.numel();
        // Each value is a function of its index alone: the same tensor on any thread count.
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
        for (int64_t i = 0; i < n; ++i) {
            p[i] = from_float<T>(random_value(seed, stream, i, exact, lo, hi));
        }
    });
    return t;
}

struct EmbeddingInputs {
    Tensor weights;  // [sum E, D] of spec.dtype
    Tensor table_offsets, feature_table, ids, offsets;
    Tensor per_sample_weights;  // [N] f32, undefined when unweighted
    ref::EmbeddingLookup lookup;
    int64_t max_length = 0;     // longest bag
    int64_t max_row_count = 0;  // most ids on one row (K of the backward)
    int64_t touched_rows = 0;   // distinct rows looked up (U)

    const Tensor* psw() const {
        return per_sample_weights.defined() ? &per_sample_weights : nullptr;
    }
};

// The row of a Zipf(alpha) rank drawn by the continuous inverse CDF from u in [0, 1), scattered
// by an odd multiplier (a bijection when rows is a power of two, nearly one otherwise).
inline int64_t zipf_row(double u, int64_t rows, double alpha) {
    const double e = static_cast<double>(rows);
    const double x =
        std::abs(alpha - 1.0) < 1e-9
            ? std::exp(u * std::log(e + 1.0))
            : std::pow(1.0 + u * (std::pow(e + 1.0, 1.0 - alpha) - 1.0), 1.0 / (1.0 - alpha));
    const auto rank =
        std::min<int64_t>(rows - 1, std::max<int64_t>(0, static_cast<int64_t>(x) - 1));
    return static_cast<int64_t>(static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull %
                                static_cast<uint64_t>(rows));
}

inline EmbeddingInputs make_embedding_inputs(const EmbeddingInputSpec& s, uint64_t seed) {
    EmbeddingInputs in;
    ref::EmbeddingLookup& a = in.lookup;
    a.dim = s.dim;
    a.table_offsets = {0};
    for (int64_t rows : s.table_rows) {
        a.table_offsets.push_back(a.table_offsets.back() + rows);
    }
    a.feature_table = s.feature_table;
    a.offsets = {0};
    rng::Rng r(seed, 11);
    const auto num_features = static_cast<int64_t>(s.feature_table.size());
    for (int64_t f = 0; f < num_features; ++f) {
        const int64_t rows =
            s.table_rows[static_cast<size_t>(s.feature_table[static_cast<size_t>(f)])];
        int64_t first = -1, last = -1;  // first and last non-empty bag of this feature
        for (int64_t b = 0; b < s.batch; ++b) {
            const int64_t length = s.lengths.empty() ? r.randint(s.min_length, s.max_length + 1)
                                                     : s.lengths[static_cast<size_t>(f)];
            const auto begin = static_cast<int64_t>(a.ids.size());
            for (int64_t i = 0; i < length; ++i) {
                a.ids.push_back(s.zipf_alpha > 0 ? zipf_row(r.uniform(), rows, s.zipf_alpha)
                                                 : r.randint(0, rows));
            }
            if (length > 0 && s.hot_row) {
                a.ids[static_cast<size_t>(begin)] = rows / 2;
            }
            if (length > 0) {
                first = first < 0 ? begin : first;
                last = begin + length - 1;
            }
            a.offsets.push_back(static_cast<int64_t>(a.ids.size()));
            in.max_length = std::max(in.max_length, length);
        }
        if (first >= 0) {
            a.ids[static_cast<size_t>(last)] = rows - 1;  // both ends of the table
            a.ids[static_cast<size_t>(first)] = 0;
        }
    }
    const auto n = static_cast<int64_t>(a.ids.size());
    in.weights = random_tensor({a.table_offsets.back(), s.dim}, s.dtype, seed, 1, s.exact,
                               s.exact ? -4.f : -1.f, s.exact ? 4.f : 1.f);
    if (s.weighted) {
        in.per_sample_weights = random_tensor({n}, DType::kF32, seed, 2, s.exact,
                                              s.exact ? 1.f : 0.25f, s.exact ? 3.f : 1.5f);
        const float* w = in.per_sample_weights.data<float>();
        a.per_sample_weights.assign(w, w + n);
    }
    in.table_offsets = Tensor::from_vector(a.table_offsets);
    in.feature_table = Tensor::from_vector(a.feature_table);
    in.ids = Tensor::from_vector(a.ids);
    in.offsets = Tensor::from_vector(a.offsets);
    std::vector<int32_t> count(static_cast<size_t>(a.table_offsets.back()), 0);
    for (int64_t f = 0; f < num_features; ++f) {
        for (int64_t i = a.offsets[static_cast<size_t>(f * s.batch)];
             i < a.offsets[static_cast<size_t>((f + 1) * s.batch)]; ++i) {
            const auto c = ++count[static_cast<size_t>(a.row_of(i, f))];
            in.max_row_count = std::max<int64_t>(in.max_row_count, c);
            in.touched_rows += c == 1 ? 1 : 0;
        }
    }
    return in;
}

}  // namespace shardrec::test
