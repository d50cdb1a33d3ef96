// libFuzzer target: the request parser of `shardrec serve` (engine/data/score_request.h). Any
// bytes must give either a request that fits the schema (dense width, ids in range, lengths that
// add up) or an error of a known kind whose message names its field; never a crash. A parsed
// request printed back as JSON parses to the same values.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/data/score_request.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shardrec::data;
    ScoreSchema schema;
    schema.num_dense = 2;
    schema.features = {"a", "b"};
    schema.rows = {10, ScoreSchema::kRawIds};  // b: a managed table's raw ids
    schema.weighted = (size % 2) == 0;         // both ways, from the same corpus
    schema.max_examples = 8;
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    ScoreRequest r;
    ScoreError e;
    if (!parse_score_request(body, schema, r, e)) {
        static const std::set<std::string> kinds = {
            "malformed_json",  "unknown_field", "unknown_feature",  "dense_width",
            "id_out_of_range", "bad_value",     "weights_mismatch", "too_many_examples"};
        if (kinds.count(e.kind) == 0)
            fail("unknown error kind", e.kind);
        if (e.message.empty() || (!e.field.empty() && e.message.find(e.field) == std::string::npos))
            fail("a message that does not name its field", e.field + " / " + e.message);
        return 0;
    }
    if (r.count > schema.max_examples || static_cast<int64_t>(r.dense.size()) != 2 * r.count)
        fail("bad shape", std::to_string(r.count));
    // Ids per feature and example: the lengths must add up, every id in range.
    std::vector<size_t> at(2, 0);
    std::string rebuilt = "{\"examples\":[";
    for (int64_t b = 0; b < r.count; ++b) {
        rebuilt += fmt::format("{}{{\"dense\":[{:.9g},{:.9g}],\"sparse\":{{", b == 0 ? "" : ",",
                               r.dense[2 * b], r.dense[2 * b + 1]);
        std::string weights;
        for (size_t f = 0; f < 2; ++f) {
            const int64_t n = r.lengths[f][static_cast<size_t>(b)];
            rebuilt += fmt::format("{}\"{}\":[", f == 0 ? "" : ",", schema.features[f]);
            weights += fmt::format("{}\"{}\":[", f == 0 ? "" : ",", schema.features[f]);
            for (int64_t k = 0; k < n; ++k, ++at[f]) {
                if (at[f] >= r.ids[f].size())
                    fail("lengths exceed the ids", std::to_string(f));
                const int64_t id = r.ids[f][at[f]];
                if (id < 0 || (schema.rows[f] != ScoreSchema::kRawIds && id >= schema.rows[f]))
                    fail("id out of range accepted", std::to_string(id));
                rebuilt += fmt::format("{}{}", k == 0 ? "" : ",", id);
                if (schema.weighted)
                    weights += fmt::format("{}{:.9g}", k == 0 ? "" : ",", r.weights[f][at[f]]);
            }
            rebuilt += "]";
            weights += "]";
        }
        rebuilt += "}";
        if (schema.weighted)
            rebuilt += ",\"weights\":{" + weights + "}";
        rebuilt += "}";
    }
    rebuilt += "]}";
    for (size_t f = 0; f < 2; ++f)
        if (at[f] != r.ids[f].size())
            fail("ids beyond the lengths", std::to_string(f));
    ScoreRequest again;
    if (!parse_score_request(rebuilt, schema, again, e) || again.count != r.count ||
        again.dense != r.dense || again.lengths != r.lengths || again.ids != r.ids ||
        again.weights != r.weights)
        fail("does not round-trip", rebuilt);
    return 0;
}
