// The Criteo click-log text format (Kaggle Display Advertising Challenge and the Terabyte click
// logs, one file per day): one sample per line, 40 tab-separated fields: the 0/1 label, 13 integer
// features (int_0..int_12, may be negative) and 26 categorical features (cat_0..cat_25, hex
// strings of 32-bit hashes). Any feature field may be empty (a missing value); the label may not.
// parse_criteo_line is a pure function of one line, so it can be fuzzed on its own.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardrec::data {

constexpr int kCriteoNumDense = 13;
constexpr int kCriteoNumSparse = 26;
constexpr int kCriteoNumFields = 1 + kCriteoNumDense + kCriteoNumSparse;  // 40

// One parsed line, before any transform. Missing values are 0, as in the DLRM reference
// (facebookresearch/dlrm data_utils.py replaces empty fields with "0").
struct CriteoLine {
    int32_t label = 0;
    std::array<int64_t, kCriteoNumDense> dense{};     // raw integers
    std::array<uint64_t, kCriteoNumSparse> sparse{};  // raw hex values
};

// "label", "int_3", "cat_7": the name of field `column` (0-based) of a line.
std::string criteo_field_name(int column);

// Parses one line (without its '\n'; a trailing '\r' is ignored). Returns "" on success, else a
// description naming the field, e.g. "field int_3 (column 5): not an integer: 'x7'". Rules: label
// "0" or "1"; an integer is an optional '-' and 1-19 decimal digits fitting int64; a categorical
// value is 1-16 hex digits (either case). `out` is unspecified after an error.
[[nodiscard]] std::string parse_criteo_line(std::string_view line, CriteoLine& out);

}  // namespace shardrec::data
