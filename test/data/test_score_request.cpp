// The request parser of `shardrec serve` (engine/data/score_request.h): a body laid out as a KJT
// slice, bit-exact floats, and for each bad input the kind, the field and the example.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "engine/data/score_request.h"

using namespace shardrec::data;

namespace {

ScoreSchema schema(bool weighted = false) {
    ScoreSchema s;
    s.num_dense = 2;
    s.features = {"a", "b"};
    s.rows = {10, 5};
    s.weighted = weighted;
    s.max_examples = 4;
    return s;
}

ScoreError parse_error(const std::string& body, bool weighted = false) {
    ScoreRequest r;
    ScoreError e;
    INFO(body);
    REQUIRE_FALSE(parse_score_request(body, schema(weighted), r, e));
    return e;
}

}  // namespace

TEST_CASE("score_request: examples as a KJT slice", "[data][serve]") {
    const std::string body = R"( {"examples": [
        {"dense": [0.1, -2.5e3], "sparse": {"b": [4, 0], "a": [9]}},
        {"sparse": {}, "dense": [1,0]},
        {"dense": [3.4028235e38, -0], "sparse": {"a": [0, 1, 2]}} ] } )";
    ScoreRequest r;
    ScoreError e;
    REQUIRE(parse_score_request(body, schema(), r, e));
    CHECK(r.count == 3);
    REQUIRE(r.dense.size() == 6);
    CHECK(r.dense[0] == 0.1F);  // strtof: the nearest f32, as the %.9g writer round-trips
    CHECK(r.dense[1] == -2500.0F);
    CHECK(r.dense[4] == 3.4028235e38F);
    CHECK(std::signbit(r.dense[5]));
    CHECK(r.lengths == std::vector<std::vector<int64_t>>{{1, 0, 3}, {2, 0, 0}});
    CHECK(r.ids == std::vector<std::vector<int64_t>>{{9, 0, 1, 2}, {4, 0}});
    CHECK(r.weights.empty());

    REQUIRE(parse_score_request(R"({"examples":[]})", schema(), r, e));
    CHECK(r.count == 0);
}

TEST_CASE("score_request: weights default to 1 per id", "[data][serve]") {
    ScoreRequest r;
    ScoreError e;
    REQUIRE(parse_score_request(
        R"({"examples":[{"dense":[0,0],"weights":{"a":[0.5,2]},"sparse":{"a":[1,2],"b":[3]}}]})",
        schema(true), r, e));
    CHECK(r.weights == std::vector<std::vector<float>>{{0.5F, 2.0F}, {1.0F}});
}

TEST_CASE("score_request: each bad input names its kind, field and example", "[data][serve]") {
    struct Case {
        std::string body, kind, field;
        int64_t example;
        std::string says;
    };

    const std::string ok = R"({"dense":[1,2]})";
    const std::vector<Case> cases = {
        {"", "malformed_json", "", -1, "at the end of the body"},
        {"{\"examples\":[" + ok + ",", "malformed_json", "", -1, "at the end of the body"},
        {R"({"examples":[{"dense":[1,2]}]} x)", "malformed_json", "", -1, "after the closing"},
        {R"({"examples":[{"dense":[1,nan]}]})", "malformed_json", "", -1, "examples[0].dense[1]"},
        {R"({"examples":[{"dense":[1,01]}]})", "malformed_json", "", -1, "expected ','"},
        {R"({"examples":[{"dense":[1,1e999]}]})", "bad_value", "examples[0].dense[1]", 0,
         "not a finite f32"},
        {R"({"examples":[)" + ok + R"(,{"dense":[1,2,3]}]})", "dense_width", "examples[1].dense", 1,
         "3 values, the model takes 2"},
        {R"({"examples":[{"sparse":{}}]})", "dense_width", "examples[0].dense", 0, "missing"},
        {R"({"examples":[)" + ok + R"(,{"dense":[1,2],"sparse":{"zz":[1]}}]})", "unknown_feature",
         "examples[1].sparse.zz", 1, "the model's features are a, b"},
        {R"({"examples":[{"dense":[1,2],"sparse":{"b":[1,5]}}]})", "id_out_of_range",
         "examples[0].sparse.b[1]", 0, "id 5 is outside the table's rows [0, 5)"},
        {R"({"examples":[{"dense":[1,2],"sparse":{"a":[-1]}}]})", "id_out_of_range",
         "examples[0].sparse.a[0]", 0, "id -1"},
        {R"({"examples":[{"dense":[1,2],"sparse":{"a":[99999999999999999999]}}]})",
         "id_out_of_range", "examples[0].sparse.a[0]", 0, "outside"},
        {R"({"examples":[{"dense":[1,2],"sparse":{"a":[1.5]}}]})", "bad_value",
         "examples[0].sparse.a[0]", 0, "not an integer id"},
        {R"({"examples":[{"dense":[1,2],"label":1}]})", "unknown_field", "examples[0].label", 0,
         "unknown field"},
        {R"({"examples":[],"extra":1})", "unknown_field", "extra", -1, "unknown field"},
        {R"({"examples":[{"dense":[1,2],"weights":{"a":[1]}}]})", "unknown_field",
         "examples[0].weights", 0, "no weighted features"},
        {R"({})", "bad_value", "examples", -1, "missing"},
        {R"({"examples":[)" + ok + "," + ok + "," + ok + "," + ok + "," + ok + "]}",
         "too_many_examples", "examples", 4, "more than 4"},
        {R"({"examples":[{"dense":[1,2],"sparse":{"a":[1],"a":[2]}}]})", "bad_value",
         "examples[0].sparse.a", 0, "given twice"},
        {"{\"examples\":[{\"dense\":[1,2],\"sparse\":{\"a\\u0000\":[1]}}]}", "malformed_json", "",
         -1, "outside ASCII"},
    };
    for (const Case& c : cases) {
        const ScoreError e = parse_error(c.body);
        INFO(c.body << " -> " << e.message);
        CHECK(e.kind == c.kind);
        CHECK(e.field == c.field);
        CHECK(e.example == c.example);
        CHECK(e.message.find(c.says) != std::string::npos);
    }
    const ScoreError w = parse_error(
        R"({"examples":[{"dense":[1,2],"sparse":{"a":[1]},"weights":{"a":[1,2]}}]})", true);
    CHECK(w.kind == "weights_mismatch");
    CHECK(w.field == "examples[0].weights.a");
    CHECK(w.message == "examples[0].weights.a: 2 weights for 1 ids");
}

TEST_CASE("score_request: weights only for weighted features, raw ids up to 2^63 - 1",
          "[data][serve]") {
    // b's table is weighted, a's not: weights for a are refused, not applied (a trained model
    // never weighted a's ids).
    ScoreSchema s = schema(true);
    s.feature_weighted = {false, true};
    ScoreRequest r;
    ScoreError e;
    REQUIRE(parse_score_request(
        R"({"examples":[{"dense":[0,0],"sparse":{"a":[1],"b":[3]},"weights":{"b":[2]}}]})", s, r,
        e));
    CHECK(r.weights == std::vector<std::vector<float>>{{1.0F}, {2.0F}});
    REQUIRE_FALSE(parse_score_request(
        R"({"examples":[{"dense":[0,0],"sparse":{"a":[1]},"weights":{"a":[5]}}]})", s, r, e));
    CHECK(e.kind == "unknown_field");
    CHECK(e.field == "examples[0].weights.a");
    CHECK(e.example == 0);
    CHECK(e.message ==
          "examples[0].weights.a: feature 'a' is not weighted (its table takes no per-id "
          "weights); leave its weights out");

    // a managed table's feature takes any raw id in [0, 2^63).
    s = schema();
    s.rows = {10, ScoreSchema::kRawIds};
    REQUIRE(parse_score_request(
        R"({"examples":[{"dense":[0,0],"sparse":{"b":[0,9223372036854775807]}}]})", s, r, e));
    CHECK(r.ids[1] == std::vector<int64_t>{0, INT64_MAX});
    for (const char* id : {"9223372036854775808", "-1"}) {
        REQUIRE_FALSE(parse_score_request(
            std::string(R"({"examples":[{"dense":[0,0],"sparse":{"b":[)") + id + "]}}]}", s, r, e));
        CHECK(e.kind == "id_out_of_range");
        CHECK(e.message == std::string("examples[0].sparse.b[0]: id ") + id +
                               " is not a raw id in [0, 2^63) (example 0)");
    }
}

TEST_CASE("score_request: the error as JSON", "[data][serve]") {
    const ScoreError e{"unknown_feature", "examples[1].sparse.\"x", 1, "bad \"x\"\n"};
    CHECK(score_error_json(e) ==
          R"({"error":{"kind":"unknown_feature","field":"examples[1].sparse.\"x","example":1,)"
          R"("message":"bad \"x\"\u000a"}})");
}
