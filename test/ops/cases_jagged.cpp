// Backend-ops cases of the jagged ops (kernels/jagged.h): offsets from lengths, the segment
// permute and the block bucketize, over random inputs with empty bags, empty segments, n = 0,
// rows of several dtypes and widths, weights or none, ids past the table, bucketize_pos and the
// unbucketize permute. The ops are integer copies and counts, so every output must equal the
// reference exactly. The references are written here, as plain loops in another formulation
// than the kernels' (the bucketize collects each output bag by filtering its input bag). Every
// value stays below 2^24, so the harness's float view of i64 outputs is exact.
#include <cmath>
#include <utility>

#include "engine/core/rng.h"
#include "kernels/jagged.h"
#include "test/ops/op_case.h"

namespace shardrec::test {
namespace {

using kernels::OpKind;

Tolerance exact_tolerance() {
    Tolerance t;
    t.exact = true;
    return t;
}

RefOutput exact_output(std::string name, std::vector<double> value) {
    std::vector<double> mag(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
        mag[i] = std::fabs(value[i]);
    }
    return RefOutput{std::move(name), std::move(value), std::move(mag)};
}

// Lengths in [0, max_len], every zero_every-th one 0 (empty bags whatever the draw).
std::vector<int64_t> random_lengths(rng::Rng& r, int64_t n, int64_t max_len, int64_t zero_every) {
    std::vector<int64_t> len(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        len[i] = i % zero_every == zero_every - 1 ? 0 : r.randint(0, max_len + 1);
    }
    return len;
}

std::vector<float> random_weights(rng::Rng& r, int64_t n) {
    std::vector<float> w(static_cast<size_t>(n));
    for (float& x : w) {
        x = r.uniform(-2.f, 2.f);
    }
    return w;
}

int64_t sum(const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) {
        s += x;
    }
    return s;
}

// ---- asynchronous_complete_cumsum ----

class CompleteCumsumCase : public OpCase {
public:
    CompleteCumsumCase(int64_t n, int64_t max_len) : n_(n), max_len_(max_len) {}

    OpKind kind() const override { return OpKind::kAsynchronousCompleteCumsum; }

    std::string vars() const override { return fmt::format("n={},L=0..{}", n_, max_len_); }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 21);
        lengths_ = Tensor::from_vector(random_lengths(r, n_, max_len_, 5), {n_});
    }

    std::vector<RefOutput> reference() const override {
        std::vector<double> off(static_cast<size_t>(n_ + 1), 0.0);
        const int64_t* len = lengths_.data<int64_t>();
        for (int64_t i = 0; i < n_; ++i) {
            off[i + 1] = off[i] + static_cast<double>(len[i]);
        }
        return {exact_output("offsets", std::move(off))};
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out = make_output({n_ + 1}, DType::kI64);
        kernels::asynchronous_complete_cumsum(in(lengths_), out, stream());
        return {out};
    }

    Tolerance tolerance(size_t /*output*/) const override { return exact_tolerance(); }

    double bytes() const override { return 16.0 * static_cast<double>(n_) + 8.0; }  // read + write

private:
    int64_t n_, max_len_;
    Tensor lengths_;
};

// ---- permute_sparse_data ----

struct PermuteShape {
    int64_t segments;
    int64_t max_segment;  // bags per segment in [0, max_segment]; every 4th segment empty
    int64_t max_len;
    DType dtype;        // of the value rows
    int64_t row_width;  // 0: values [N], else [N, row_width]
    bool weighted;
};

class PermuteSparseDataCase : public OpCase {
public:
    explicit PermuteSparseDataCase(PermuteShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kPermuteSparseData; }

    std::string vars() const override {
        return fmt::format("S={},bags=0..{},L=0..{},values={}x{},weighted={}", s_.segments,
                           s_.max_segment, s_.max_len, dtype_name(s_.dtype), s_.row_width,
                           s_.weighted ? 1 : 0);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 22);
        std::vector<int64_t> sizes(static_cast<size_t>(s_.segments));
        for (int64_t k = 0; k < s_.segments; ++k) {
            sizes[k] = k % 4 == 1 ? 0 : r.randint(0, s_.max_segment + 1);
        }
        std::vector<int64_t> perm(sizes.size());
        for (size_t i = 0; i < perm.size(); ++i) {
            perm[i] = static_cast<int64_t>(i);
        }
        for (size_t i = perm.size(); i > 1; --i) {  // Fisher-Yates
            std::swap(perm[i - 1],
                      perm[static_cast<size_t>(r.randint(0, static_cast<int64_t>(i)))]);
        }
        const std::vector<int64_t> len = random_lengths(r, sum(sizes), s_.max_len, 3);
        const int64_t n = sum(len);
        permute_ = Tensor::from_vector(perm, {s_.segments});
        segment_sizes_ = Tensor::from_vector(sizes, {s_.segments});
        lengths_ = Tensor::from_vector(len, {static_cast<int64_t>(len.size())});
        values_ = Tensor::empty(s_.row_width == 0 ? Shape{n} : Shape{n, s_.row_width}, s_.dtype);
        for (int64_t i = 0; i < values_.numel(); ++i) {
            switch (s_.dtype) {
                case DType::kI64:
                    values_.data<int64_t>()[i] = r.randint(0, int64_t{1} << 24);
                    break;
                case DType::kF32:
                    values_.data<float>()[i] = r.uniform(-1.f, 1.f);
                    break;
                case DType::kBF16:
                    values_.data<BFloat16>()[i] = float_to_bf16(r.uniform(-1.f, 1.f));
                    break;
                default:
                    values_.data<uint8_t>()[i] = static_cast<uint8_t>(r.randint(0, 256));
                    break;
            }
        }
        if (s_.weighted) {
            weights_ = Tensor::from_vector(random_weights(r, n), {n});
        }
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<int64_t> perm = permute_.to_vector<int64_t>();
        const std::vector<int64_t> sizes = segment_sizes_.to_vector<int64_t>();
        const std::vector<int64_t> len = lengths_.to_vector<int64_t>();
        const std::vector<double> vals = to_double(values_);
        const std::vector<double> w = s_.weighted ? to_double(weights_) : std::vector<double>{};
        const int64_t width = s_.row_width == 0 ? 1 : s_.row_width;
        // Each input segment as (first bag, first row), then the segments in permute order.
        std::vector<int64_t> bag_at(sizes.size()), row_at(sizes.size());
        int64_t bag = 0, row = 0;
        for (size_t k = 0; k < sizes.size(); ++k) {
            bag_at[k] = bag;
            row_at[k] = row;
            for (int64_t j = 0; j < sizes[k]; ++j) {
                row += len[bag + j];
            }
            bag += sizes[k];
        }
        std::vector<double> out_len, out_vals, out_w;
        for (int64_t k : perm) {
            int64_t r = row_at[k];
            for (int64_t j = 0; j < sizes[k]; ++j) {
                const int64_t l = len[bag_at[k] + j];
                out_len.push_back(static_cast<double>(l));
                for (int64_t e = r * width; e < (r + l) * width; ++e) {
                    out_vals.push_back(vals[e]);
                }
                for (int64_t e = r; s_.weighted && e < r + l; ++e) {
                    out_w.push_back(w[e]);
                }
                r += l;
            }
        }
        std::vector<RefOutput> out = {exact_output("permuted_lengths", std::move(out_len)),
                                      exact_output("permuted_values", std::move(out_vals))};
        if (s_.weighted) {
            out.push_back(exact_output("permuted_weights", std::move(out_w)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        Tensor out_lengths = make_output(lengths_.shape(), DType::kI64);
        Tensor out_values = make_output(values_.shape(), values_.dtype());
        Tensor out_weights = s_.weighted ? make_output(weights_.shape()) : Tensor();
        kernels::permute_sparse_data(in(permute_), in(segment_sizes_), in(lengths_), in(values_),
                                     s_.weighted ? &in(weights_) : nullptr, out_lengths, out_values,
                                     s_.weighted ? &out_weights : nullptr, stream());
        if (s_.weighted) {
            return {out_lengths, out_values, out_weights};
        }
        return {out_lengths, out_values};
    }

    Tolerance tolerance(size_t /*output*/) const override { return exact_tolerance(); }

    double bytes() const override {  // every length, row and weight read once and written once
        return 2.0 * static_cast<double>(lengths_.nbytes() + values_.nbytes() +
                                         (s_.weighted ? weights_.nbytes() : 0));
    }

private:
    PermuteShape s_;
    Tensor permute_, segment_sizes_, lengths_, values_, weights_;
};

// ---- block_bucketize_sparse_features ----

struct BucketizeShape {
    int64_t features, batch, buckets, max_len;
    bool weighted;
    bool bucketize_pos;
    bool unbucketize_permute;
    bool past_table;  // some ids >= block * buckets
};

class BlockBucketizeCase : public OpCase {
public:
    explicit BlockBucketizeCase(BucketizeShape s) : s_(s) {}

    OpKind kind() const override { return OpKind::kBlockBucketizeSparseFeatures; }

    std::string vars() const override {
        return fmt::format("F={},B={},R={},L=0..{},weighted={},pos={},permute={},past_table={}",
                           s_.features, s_.batch, s_.buckets, s_.max_len, s_.weighted ? 1 : 0,
                           s_.bucketize_pos ? 1 : 0, s_.unbucketize_permute ? 1 : 0,
                           s_.past_table ? 1 : 0);
    }

    void make_inputs(uint64_t seed) override {
        rng::Rng r(seed, 23);
        std::vector<int64_t> block(static_cast<size_t>(s_.features));
        for (int64_t& b : block) {
            b = r.randint(1, 40);
        }
        const std::vector<int64_t> len = random_lengths(r, s_.features * s_.batch, s_.max_len, 4);
        std::vector<int64_t> ids;
        for (size_t bag = 0; bag < len.size(); ++bag) {
            const int64_t rows = block[bag / static_cast<size_t>(s_.batch)] * s_.buckets;
            for (int64_t j = 0; j < len[bag]; ++j) {
                ids.push_back(r.randint(0, s_.past_table ? 2 * rows + 7 : rows));
            }
        }
        const auto n = static_cast<int64_t>(ids.size());
        block_sizes_ = Tensor::from_vector(block, {s_.features});
        lengths_ = Tensor::from_vector(len, {static_cast<int64_t>(len.size())});
        indices_ = Tensor::from_vector(ids, {n});
        if (s_.weighted) {
            weights_ = Tensor::from_vector(random_weights(r, n), {n});
        }
    }

    std::vector<RefOutput> reference() const override {
        const std::vector<int64_t> block = block_sizes_.to_vector<int64_t>();
        const std::vector<int64_t> len = lengths_.to_vector<int64_t>();
        const std::vector<int64_t> ids = indices_.to_vector<int64_t>();
        const std::vector<double> w = s_.weighted ? to_double(weights_) : std::vector<double>{};
        const int64_t R = s_.buckets;
        std::vector<int64_t> start(len.size() + 1, 0);
        for (size_t bag = 0; bag < len.size(); ++bag) {
            start[bag + 1] = start[bag] + len[bag];
        }
        const auto bucket_of = [&](int64_t x, int64_t bs) { return x < bs * R ? x / bs : x % R; };
        std::vector<double> out_len, out_ids, out_w, perm(ids.size());
        // Output bag (r, f, b): the ids of input bag (f, b) whose bucket is r, in bag order.
        for (int64_t r = 0; r < R; ++r) {
            for (size_t bag = 0; bag < len.size(); ++bag) {
                const int64_t bs = block[bag / static_cast<size_t>(s_.batch)];
                int64_t count = 0;
                for (int64_t i = start[bag]; i < start[bag + 1]; ++i) {
                    const int64_t x = ids[i];
                    if (bucket_of(x, bs) != r) {
                        continue;
                    }
                    perm[i] = static_cast<double>(out_ids.size());
                    out_ids.push_back(static_cast<double>(x < bs * R ? x % bs : x / R));
                    if (s_.bucketize_pos) {
                        out_w.push_back(static_cast<double>(i - start[bag]));
                    } else if (s_.weighted) {
                        out_w.push_back(w[i]);
                    }
                    ++count;
                }
                out_len.push_back(static_cast<double>(count));
            }
        }
        std::vector<RefOutput> out = {exact_output("new_lengths", std::move(out_len)),
                                      exact_output("new_indices", std::move(out_ids))};
        if (has_new_weights()) {
            out.push_back(exact_output("new_weights", std::move(out_w)));
        }
        if (s_.unbucketize_permute) {
            out.push_back(exact_output("unbucketize_permute", std::move(perm)));
        }
        return out;
    }

    std::vector<Tensor> run(Device /*device*/) override {
        const int64_t n = indices_.numel();
        Tensor new_lengths = make_output({s_.buckets * lengths_.numel()}, DType::kI64);
        Tensor new_indices = make_output({n}, DType::kI64);
        Tensor new_weights = has_new_weights() ? make_output({n}) : Tensor();
        Tensor perm = s_.unbucketize_permute ? make_output({n}, DType::kI64) : Tensor();
        kernels::block_bucketize_sparse_features(
            in(lengths_), in(indices_), in(block_sizes_), s_.buckets,
            s_.weighted ? &in(weights_) : nullptr, s_.bucketize_pos, new_lengths, new_indices,
            has_new_weights() ? &new_weights : nullptr, s_.unbucketize_permute ? &perm : nullptr,
            stream());
        std::vector<Tensor> out = {new_lengths, new_indices};
        if (has_new_weights()) {
            out.push_back(new_weights);
        }
        if (s_.unbucketize_permute) {
            out.push_back(perm);
        }
        return out;
    }

    Tolerance tolerance(size_t /*output*/) const override { return exact_tolerance(); }

    double bytes() const override {  // lengths and ids read twice, ids and weights written once
        const double n = static_cast<double>(indices_.numel());
        return 16.0 * static_cast<double>(lengths_.numel()) + 8.0 * s_.buckets * lengths_.numel() +
               16.0 * n + 8.0 * n + (has_new_weights() ? 8.0 * n : 0.0) +
               (s_.unbucketize_permute ? 8.0 * n : 0.0);
    }

private:
    bool has_new_weights() const { return s_.weighted || s_.bucketize_pos; }

    BucketizeShape s_;
    Tensor block_sizes_, lengths_, indices_, weights_;
};

const RegisterOpCases kRegister([] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const auto& [n, max_len] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 3}, {1, 5}, {7, 0}, {1000, 9}, {100003, 100}}) {
        cases.push_back(std::make_unique<CompleteCumsumCase>(n, max_len));
    }
    for (const PermuteShape& s : std::vector<PermuteShape>{
             {0, 3, 3, DType::kI64, 0, false},   // no segments
             {1, 4, 5, DType::kI64, 0, true},    // identity
             {3, 2, 0, DType::kI64, 0, true},    // empty bags only: no values
             {8, 6, 7, DType::kI64, 0, false},   // recat-sized: 2 features x 4 ranks
             {16, 9, 12, DType::kF32, 3, true},  // embedding rows [N, 3]
             {13, 5, 40, DType::kBF16, 5, false},
             {9, 7, 9, DType::kU8, 3, true},  // 3-byte rows: byte copies
             {500, 30, 20, DType::kI64, 0, true}}) {
        cases.push_back(std::make_unique<PermuteSparseDataCase>(s));
    }
    for (const BucketizeShape& s : std::vector<BucketizeShape>{
             {1, 1, 1, 0, false, false, true, false},   // one empty bag: no ids
             {2, 0, 3, 4, true, false, true, false},    // empty batch
             {0, 5, 2, 4, false, false, false, false},  // no features
             {3, 5, 2, 4, true, false, true, false},
             {2, 7, 1, 9, false, false, false, true},  // one bucket: new ids are the ids
             {4, 33, 4, 70, false, true, true, true},  // bags longer than a warp, positions
             {5, 64, 8, 10, true, false, true, true},
             {3, 100, 7, 200, true, true, false, true}}) {  // positions replace weights
        cases.push_back(std::make_unique<BlockBucketizeCase>(s));
    }
    return cases;
});

}  // namespace
}  // namespace shardrec::test
