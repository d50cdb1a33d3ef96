// Text as a JSON string literal, for the JSON shardrec writes by hand (shard manifests, the
// scoring server's errors): quotes, backslashes and control bytes escaped. Header-only, so the
// fuzz targets that link single sources need nothing more.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace shardrec {

inline std::string json_quote(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace shardrec
