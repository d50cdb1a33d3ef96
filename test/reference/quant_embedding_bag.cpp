// Float64 reference of the quantized embedding tables: plain loops, no engine code.
#include "test/reference/quant_embedding_bag.h"

#include <cmath>

#include "test/reference/qcomm_codec.h"

namespace shardrec::ref {

int64_t quant_row_bytes(int bits, int64_t dim) {
    const int64_t data = (dim * bits + 7) / 8 + (bits <= 8 ? 4 : 0);
    return (data + 15) / 16 * 16;
}

double quant_value(const QuantTable& table, int64_t r, int64_t d, double* mag) {
    const uint8_t* row = table.bytes.data() + r * quant_row_bytes(table.bits, table.dim);
    auto u16 = [&](int64_t at) { return static_cast<uint16_t>(row[at] | (row[at + 1] << 8)); };
    auto f32 = [&](int64_t at) {  // IEEE binary32 from its bit fields
        uint32_t u = 0;
        for (int k = 3; k >= 0; --k)
            u = (u << 8) | row[at + k];
        const int exponent = static_cast<int>((u >> 23) & 0xff);
        const double mantissa = static_cast<double>(u & 0x7fffff);
        const double v = exponent == 0     ? std::ldexp(mantissa, -149)
                         : exponent == 255 ? (mantissa == 0 ? INFINITY : NAN)
                                           : std::ldexp(1.0 + mantissa / 8388608.0, exponent - 127);
        return (u >> 31) ? -v : v;
    };
    double value = 0;
    if (table.fp8) {
        value = fp8_e4m3_value(row[4 + d]) * f32(0);
    } else if (table.bits == 32) {
        value = f32(4 * d);
    } else if (table.bits == 16) {
        value = fp16_value(u16(2 * d));
    } else {
        const double scale = fp16_value(u16(0)), bias = fp16_value(u16(2));
        const int64_t bit = d * table.bits;
        const int code = (row[4 + bit / 8] >> (bit % 8)) & ((1 << table.bits) - 1);
        if (mag != nullptr)
            *mag = std::fabs(code * scale) + std::fabs(bias);
        return code * scale + bias;
    }
    if (mag != nullptr)
        *mag = std::fabs(value);
    return value;
}

Values quant_embedding_bag_forward(const std::vector<QuantTable>& tables,
                                   const EmbeddingLookup& a,
                                   PoolingMode mode) {
    const int64_t F = a.num_features(), B = a.batch();
    std::vector<int64_t> col(static_cast<size_t>(F) + 1, 0);
    for (int64_t f = 0; f < F; ++f) {
        col[static_cast<size_t>(f) + 1] =
            col[static_cast<size_t>(f)] +
            tables[static_cast<size_t>(a.feature_table[static_cast<size_t>(f)])].dim;
    }
    const int64_t cols = col.back();
    Values out;
    out.value.assign(static_cast<size_t>(B * cols), 0.0);
    out.mag.assign(out.value.size(), 0.0);
    for (int64_t f = 0; f < F; ++f) {
        const QuantTable& t = tables[static_cast<size_t>(a.feature_table[static_cast<size_t>(f)])];
        for (int64_t b = 0; b < B; ++b) {
            const int64_t begin = a.offsets[static_cast<size_t>(f * B + b)];
            const int64_t end = a.offsets[static_cast<size_t>(f * B + b + 1)];
            for (int64_t i = begin; i < end; ++i) {
                double s = a.per_sample_weights.empty()
                               ? 1.0
                               : a.per_sample_weights[static_cast<size_t>(i)];
                if (mode == PoolingMode::kMean)
                    s /= static_cast<double>(end - begin);
                for (int64_t d = 0; d < t.dim; ++d) {
                    double m = 0;
                    const double v = quant_value(t, a.ids[static_cast<size_t>(i)], d, &m);
                    const auto o = static_cast<size_t>(b * cols + col[static_cast<size_t>(f)] + d);
                    out.value[o] += s * v;
                    out.mag[o] += std::fabs(s) * m;
                }
            }
        }
    }
    return out;
}

}  // namespace shardrec::ref
