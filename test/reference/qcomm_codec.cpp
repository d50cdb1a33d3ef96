#include "test/reference/qcomm_codec.h"

#include <cmath>
#include <limits>

namespace shardrec::ref {
namespace {

// A binary float of `exp_bits` exponent and `mant_bits` mantissa bits, bias 2^(exp_bits-1) - 1;
// `ieee_specials`: the all-ones exponent is Inf/NaN (IEEE), else only all-ones is NaN (E4M3FN).
double float_value(uint32_t bits, int exp_bits, int mant_bits, bool ieee_specials) {
    const bool negative = (bits >> (exp_bits + mant_bits)) & 1u;
    const uint32_t e = (bits >> mant_bits) & ((1u << exp_bits) - 1);
    const uint32_t m = bits & ((1u << mant_bits) - 1);
    const uint32_t e_max = (1u << exp_bits) - 1;
    const int bias = (1 << (exp_bits - 1)) - 1;
    double v;
    if (ieee_specials && e == e_max) {
        v = m == 0 ? std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::quiet_NaN();
    } else if (!ieee_specials && e == e_max && m == (1u << mant_bits) - 1) {
        v = std::numeric_limits<double>::quiet_NaN();
    } else if (e == 0) {
        v = std::ldexp(static_cast<double>(m), 1 - bias - mant_bits);
    } else {
        v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mant_bits),
                       static_cast<int>(e) - bias);
    }
    return negative ? -v : v;
}

}  // namespace

double fp16_value(uint16_t bits) {
    return float_value(bits, 5, 10, true);
}

double bf16_value(uint16_t bits) {
    return float_value(bits, 8, 7, true);
}

double fp8_e4m3_value(uint8_t bits) {
    return float_value(bits, 4, 3, false);
}

}  // namespace shardrec::ref
