// Float64 reference of the quantized communication codecs (the judge of kernels/qcomm_codec.h):
// the value of each code, from its bit fields alone (sign * 2^(e - bias) * (1 + m / 2^M), and the
// subnormals), with no use of the engine's conversions.
#pragma once

#include <cstdint>

namespace shardrec::ref {

double fp16_value(uint16_t bits);     // IEEE binary16; +-Inf and NaN as such
double bf16_value(uint16_t bits);     // bfloat16
double fp8_e4m3_value(uint8_t bits);  // OCP E4M3FN: 0x7f/0xff are NaN, no infinities

}  // namespace shardrec::ref
