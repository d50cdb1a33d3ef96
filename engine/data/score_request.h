// The body of `shardrec serve`'s POST /v1/score (and of `shardrec predict --data FILE.json`):
//   {"examples": [{"dense": [13 numbers],
//                  "sparse": {"f_t0": [ids...], ...},      // features left out: empty bags
//                  "weights": {"f_t0": [w...], ...}}]}     // optional, weighted features only
// read by a small hand-written parser for this one schema (no JSON library is in the build; the
// schema is fixed, so the parser never recurses into arbitrary values and its depth is bounded)
// and checked against the model as it is read: the dense width, known feature names, ids inside
// their table's rows, weights as many as ids. The first problem is returned, naming the field
// (examples[3].sparse.f_t0[2]) and the example; nothing throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardrec::data {

// What a request is checked against: the model's inputs.
struct ScoreSchema {
    static constexpr int64_t kRawIds = -1;

    int64_t num_dense = 0;
    std::vector<std::string> features;   // the KJT's keys, in order
    std::vector<int64_t> rows;           // per feature: ids must lie in [0, rows); kRawIds: a
                                         // managed-collision table's raw ids, any in [0, 2^63)
    bool weighted = false;               // the model takes per-id weights
    std::vector<bool> feature_weighted;  // per feature: its table is weighted (empty: all are,
                                         // when `weighted`)
    int64_t max_examples = 0;            // 0: no limit
};

// The examples of one request, laid out as a KJT slice: per feature, the bag lengths of every
// example and the ids (and weights) of those bags concatenated.
struct ScoreRequest {
    int64_t count = 0;
    std::vector<float> dense;                   // [count * num_dense]
    std::vector<std::vector<int64_t>> lengths;  // [F][count]
    std::vector<std::vector<int64_t>> ids;      // [F][sum of lengths[f]]
    std::vector<std::vector<float>> weights;    // [F][sum of lengths[f]] when schema.weighted
};

struct ScoreError {
    std::string kind;      // malformed_json, unknown_field, unknown_feature, dense_width,
                           // id_out_of_range, bad_value, weights_mismatch, too_many_examples
    std::string field;     // "examples[3].sparse.f_t0[2]", or "" for the body as a whole
    int64_t example = -1;  // the example's index, -1 when none
    std::string message;   // one sentence naming the field and the example
};

// Parses and checks `body`. Returns true and fills `out`, or false and fills `error`.
bool parse_score_request(std::string_view body,
                         const ScoreSchema& schema,
                         ScoreRequest& out,
                         ScoreError& error);

// The error as the JSON body of a 400: {"error":{"kind":..,"field":..,"example":..,"message":..}}.
std::string score_error_json(const ScoreError& error);

}  // namespace shardrec::data
