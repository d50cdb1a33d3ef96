#include "engine/data/criteo_tsv.h"

#include <fmt/format.h>

#include <limits>

namespace shardrec::data {
namespace {

// At most this much of a bad value is quoted in a message (lines can be arbitrary bytes).
constexpr size_t kQuoteMax = 32;

std::string quote(std::string_view text) {
    std::string out;
    for (const char c : text.substr(0, kQuoteMax)) {
        const auto u = static_cast<unsigned char>(c);
        out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
    }
    return text.size() > kQuoteMax ? out + "..." : out;
}

std::string field_error(int column, std::string_view what, std::string_view text) {
    return fmt::format("field {} (column {}): {}: '{}'", criteo_field_name(column), column + 1,
                       what, quote(text));
}

// An optional '-' then decimal digits, within int64.
bool parse_int(std::string_view s, int64_t& out) {
    const bool negative = !s.empty() && s[0] == '-';
    if (negative) {
        s.remove_prefix(1);
    }
    if (s.empty() || s.size() > 19) {
        return false;
    }
    uint64_t v = 0;
    for (const char c : s) {
        if (c < '0' || c > '9') {
            return false;
        }
        v = v * 10 + static_cast<uint64_t>(c - '0');  // 19 digits cannot overflow uint64
    }
    const auto max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (v > max + (negative ? 1 : 0)) {
        return false;
    }
    out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return true;
}

bool parse_hex(std::string_view s, uint64_t& out) {
    if (s.empty() || s.size() > 16) {
        return false;
    }
    uint64_t v = 0;
    for (const char c : s) {
        int d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else {
            return false;
        }
        v = (v << 4) | static_cast<uint64_t>(d);
    }
    out = v;
    return true;
}

std::string parse_field(int column, std::string_view text, CriteoLine& out) {
    if (column == 0) {
        if (text != "0" && text != "1") {
            return field_error(column, "label must be 0 or 1", text);
        }
        out.label = text[0] - '0';
        return "";
    }
    if (column <= kCriteoNumDense) {
        int64_t& v = out.dense[static_cast<size_t>(column - 1)];
        v = 0;
        if (!text.empty() && !parse_int(text, v)) {
            return field_error(column, "not an integer", text);
        }
        return "";
    }
    uint64_t& v = out.sparse[static_cast<size_t>(column - 1 - kCriteoNumDense)];
    v = 0;
    if (!text.empty() && !parse_hex(text, v)) {
        return field_error(column, "not a hexadecimal value of 1-16 digits", text);
    }
    return "";
}

}  // namespace

std::string criteo_field_name(int column) {
    if (column == 0) {
        return "label";
    }
    if (column <= kCriteoNumDense) {
        return fmt::format("int_{}", column - 1);
    }
    return fmt::format("cat_{}", column - 1 - kCriteoNumDense);
}

std::string parse_criteo_line(std::string_view line, CriteoLine& out) {
    if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
    }
    size_t fields = 1;
    for (const char c : line) {
        fields += c == '\t' ? 1 : 0;
    }
    if (fields != kCriteoNumFields) {
        return fmt::format("expected {} tab-separated fields, got {}", kCriteoNumFields, fields);
    }
    size_t start = 0;
    for (int column = 0; column < kCriteoNumFields; ++column) {
        const size_t tab = line.find('\t', start);
        const size_t end = tab == std::string_view::npos ? line.size() : tab;
        std::string error = parse_field(column, line.substr(start, end - start), out);
        if (!error.empty()) {
            return error;
        }
        start = end + 1;
    }
    return "";
}

}  // namespace shardrec::data
