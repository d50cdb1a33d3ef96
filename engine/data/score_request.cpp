#include "engine/data/score_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "engine/core/json_text.h"

namespace shardrec::data {

namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

class Parser {
public:
    Parser(std::string_view body, const ScoreSchema& schema, ScoreRequest& out, ScoreError& error)
        : s_(body), schema_(schema), out_(out), error_(error) {
        for (size_t f = 0; f < schema.features.size(); ++f)
            feature_index_.emplace(schema.features[f], static_cast<int>(f));
    }

    bool parse() {
        const size_t F = schema_.features.size();
        out_ = ScoreRequest{};
        out_.lengths.resize(F);
        out_.ids.resize(F);
        if (schema_.weighted)
            out_.weights.resize(F);
        ws();
        if (!expect('{'))
            return false;
        bool seen_examples = false;
        if (!peek('}')) {
            do {
                std::string key;
                if (!string(key, ""))
                    return false;
                if (!expect(':'))
                    return false;
                if (key != "examples")
                    return fail(
                        "unknown_field", key, -1,
                        fmt::format("{}: unknown field (the body has only 'examples')", key));
                if (seen_examples)
                    return fail("bad_value", "examples", -1, "examples: given twice");
                seen_examples = true;
                if (!examples())
                    return false;
            } while (comma_or('}'));
            if (failed_)
                return false;
        }
        ws();
        if (pos_ != s_.size())
            return malformed("content after the closing '}'");
        if (!seen_examples)
            return fail("bad_value", "examples", -1, "examples: missing (the body's one field)");
        return true;
    }

private:
    // One example's fields before they are checked and appended.
    struct Example {
        std::optional<std::vector<float>> dense;
        std::vector<std::optional<std::vector<int64_t>>> ids;
        std::vector<std::optional<std::vector<float>>> weights;
    };

    bool examples() {
        if (!expect('['))
            return false;
        if (peek(']'))
            return true;
        int64_t i = 0;
        do {
            if (schema_.max_examples > 0 && i >= schema_.max_examples)
                return fail("too_many_examples", "examples", i,
                            fmt::format("examples: more than {} examples in one request (the "
                                        "server's --max-batch)",
                                        schema_.max_examples));
            if (!example(i))
                return false;
            ++i;
        } while (comma_or(']'));
        return !failed_;
    }

    bool example(int64_t i) {
        const std::string at = fmt::format("examples[{}]", i);
        const size_t F = schema_.features.size();
        Example ex;
        ex.ids.resize(F);
        ex.weights.resize(F);
        if (!expect('{'))
            return false;
        if (!peek('}')) {
            do {
                std::string key;
                if (!string(key, at))
                    return false;
                if (!expect(':'))
                    return false;
                const std::string field = at + "." + key;
                if (key == "dense") {
                    if (ex.dense)
                        return fail("bad_value", field, i, field + ": given twice");
                    ex.dense.emplace();
                    if (!float_array(field, i, *ex.dense))
                        return false;
                } else if (key == "sparse" || key == "weights") {
                    if (!bags(field, i, key == "weights", ex))
                        return false;
                } else {
                    return fail("unknown_field", field, i,
                                fmt::format("{}: unknown field of example {} (an example has "
                                            "dense, sparse and weights)",
                                            field, i));
                }
            } while (comma_or('}'));
            if (failed_)
                return false;
        }
        if (!ex.dense)
            return fail("dense_width", at + ".dense", i,
                        fmt::format("{}.dense: missing; the model takes {} dense features", at,
                                    schema_.num_dense));
        if (static_cast<int64_t>(ex.dense->size()) != schema_.num_dense)
            return fail("dense_width", at + ".dense", i,
                        fmt::format("{}.dense: {} values, the model takes {}", at, ex.dense->size(),
                                    schema_.num_dense));
        for (size_t f = 0; f < F; ++f) {
            const std::string& name = schema_.features[f];
            const size_t n = ex.ids[f] ? ex.ids[f]->size() : 0;
            if (ex.weights[f] && ex.weights[f]->size() != n)
                return fail("weights_mismatch", at + ".weights." + name, i,
                            fmt::format("{}.weights.{}: {} weights for {} ids", at, name,
                                        ex.weights[f]->size(), n));
        }
        // Checked: append.
        out_.dense.insert(out_.dense.end(), ex.dense->begin(), ex.dense->end());
        for (size_t f = 0; f < F; ++f) {
            const size_t n = ex.ids[f] ? ex.ids[f]->size() : 0;
            out_.lengths[f].push_back(static_cast<int64_t>(n));
            if (n == 0)
                continue;
            out_.ids[f].insert(out_.ids[f].end(), ex.ids[f]->begin(), ex.ids[f]->end());
            if (schema_.weighted) {
                if (ex.weights[f])
                    out_.weights[f].insert(out_.weights[f].end(), ex.weights[f]->begin(),
                                           ex.weights[f]->end());
                else
                    out_.weights[f].insert(out_.weights[f].end(), n, 1.0F);
            }
        }
        ++out_.count;
        return true;
    }

    // "sparse": {feature: [ids]} or "weights": {feature: [w]}.
    bool bags(const std::string& field, int64_t i, bool weights, Example& ex) {
        if (weights && !schema_.weighted)
            return fail(
                "unknown_field", field, i,
                fmt::format("{}: the model has no weighted features; leave weights out", field));
        if (!expect('{'))
            return false;
        if (peek('}'))
            return true;
        do {
            std::string name;
            if (!string(name, field))
                return false;
            if (!expect(':'))
                return false;
            const std::string at = field + "." + name;
            const auto it = feature_index_.find(name);
            if (it == feature_index_.end())
                return fail("unknown_feature", at, i,
                            fmt::format("{}: unknown feature '{}' in example {}; the model's "
                                        "features are {}",
                                        at, name, i, fmt::join(schema_.features, ", ")));
            const auto f = static_cast<size_t>(it->second);
            if (weights && !schema_.feature_weighted.empty() && !schema_.feature_weighted[f])
                return fail("unknown_field", at, i,
                            fmt::format("{}: feature '{}' is not weighted (its table takes no "
                                        "per-id weights); leave its weights out",
                                        at, name));
            if (weights ? ex.weights[f].has_value() : ex.ids[f].has_value())
                return fail("bad_value", at, i, at + ": given twice");
            if (weights) {
                ex.weights[f].emplace();
                if (!float_array(at, i, *ex.weights[f]))
                    return false;
            } else {
                ex.ids[f].emplace();
                if (!id_array(at, i, schema_.rows[f], *ex.ids[f]))
                    return false;
            }
        } while (comma_or('}'));
        return !failed_;
    }

    bool float_array(const std::string& field, int64_t i, std::vector<float>& out) {
        if (!expect('['))
            return false;
        if (peek(']'))
            return true;
        do {
            // The element's name is built only for an error (a request holds thousands of them).
            const auto at = [&] { return fmt::format("{}[{}]", field, out.size()); };
            std::string_view tok;
            if (!number(tok, field, out.size()))
                return false;
            char text[72];  // number() bounds a token to 64 characters
            std::memcpy(text, tok.data(), tok.size());
            text[tok.size()] = '\0';
            const float v = std::strtof(text, nullptr);
            if (!std::isfinite(v))
                return fail("bad_value", at(), i,
                            fmt::format("{}: {} is not a finite f32 (example {})", at(), text, i));
            out.push_back(v);
        } while (comma_or(']'));
        return !failed_;
    }

    bool id_array(const std::string& field, int64_t i, int64_t rows, std::vector<int64_t>& out) {
        if (!expect('['))
            return false;
        if (peek(']'))
            return true;
        do {
            const auto at = [&] { return fmt::format("{}[{}]", field, out.size()); };
            std::string_view tok;
            if (!number(tok, field, out.size()))
                return false;
            if (tok.find_first_of(".eE") != std::string_view::npos)
                return fail("bad_value", at(), i,
                            fmt::format("{}: {} is not an integer id (example {})", at(), tok, i));
            char text[72];
            std::memcpy(text, tok.data(), tok.size());
            text[tok.size()] = '\0';
            errno = 0;
            const long long v = std::strtoll(text, nullptr, 10);
            const bool raw = rows == ScoreSchema::kRawIds;
            if (errno == ERANGE || v < 0 || (!raw && v >= rows))
                return fail("id_out_of_range", at(), i,
                            raw ? fmt::format("{}: id {} is not a raw id in [0, 2^63) (example {})",
                                              at(), tok, i)
                                : fmt::format("{}: id {} is outside the table's rows [0, {}) "
                                              "(example {})",
                                              at(), tok, rows, i));
            out.push_back(static_cast<int64_t>(v));
        } while (comma_or(']'));
        return !failed_;
    }

    // A JSON number token: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    bool number(std::string_view& tok, const std::string& array, size_t index) {
        const auto field = [&] { return fmt::format("{}[{}]", array, index); };
        ws();
        const size_t start = pos_;
        if (at('-'))
            ++pos_;
        if (at('0')) {
            ++pos_;
        } else if (pos_ < s_.size() && is_digit(s_[pos_])) {
            while (pos_ < s_.size() && is_digit(s_[pos_]))
                ++pos_;
        } else {
            return malformed(fmt::format("expected a number for {}", field()));
        }
        if (at('.')) {
            ++pos_;
            if (!(pos_ < s_.size() && is_digit(s_[pos_])))
                return malformed(fmt::format("expected a digit after '.' in {}", field()));
            while (pos_ < s_.size() && is_digit(s_[pos_]))
                ++pos_;
        }
        if (at('e') || at('E')) {
            ++pos_;
            if (at('+') || at('-'))
                ++pos_;
            if (!(pos_ < s_.size() && is_digit(s_[pos_])))
                return malformed(fmt::format("expected an exponent in {}", field()));
            while (pos_ < s_.size() && is_digit(s_[pos_]))
                ++pos_;
        }
        if (pos_ - start > 64)
            return malformed(fmt::format("a number of more than 64 characters in {}", field()));
        tok = s_.substr(start, pos_ - start);
        return true;
    }

    // A JSON string; \uXXXX escapes only for ASCII (feature names are ASCII).
    bool string(std::string& out, const std::string& where) {
        ws();
        if (!at('"'))
            return malformed(where.empty() ? "expected a field name"
                                           : "expected a field name in " + where);
        ++pos_;
        while (pos_ < s_.size() && s_[pos_] != '"') {
            char c = s_[pos_++];
            if (static_cast<unsigned char>(c) < 0x20)
                return malformed("a control character inside a string");
            if (c == '\\') {
                if (pos_ >= s_.size())
                    break;
                const char e = s_[pos_++];
                switch (e) {
                    case '"':
                    case '\\':
                    case '/':
                        c = e;
                        break;
                    case 'b':
                        c = '\b';
                        break;
                    case 'f':
                        c = '\f';
                        break;
                    case 'n':
                        c = '\n';
                        break;
                    case 'r':
                        c = '\r';
                        break;
                    case 't':
                        c = '\t';
                        break;
                    case 'u': {
                        if (s_.size() - pos_ < 4)
                            return malformed("a short \\u escape");
                        unsigned v = 0;
                        for (int k = 0; k < 4; ++k) {
                            const char h = s_[pos_++];
                            v <<= 4;
                            if (is_digit(h))
                                v |= static_cast<unsigned>(h - '0');
                            else if (h >= 'a' && h <= 'f')
                                v |= static_cast<unsigned>(h - 'a' + 10);
                            else if (h >= 'A' && h <= 'F')
                                v |= static_cast<unsigned>(h - 'A' + 10);
                            else
                                return malformed("a bad \\u escape");
                        }
                        if (v == 0 || v > 0x7f)
                            return malformed(
                                "a \\u escape outside ASCII (feature names are ASCII)");
                        c = static_cast<char>(v);
                        break;
                    }
                    default:
                        return malformed("a bad escape in a string");
                }
            }
            if (out.size() >= 256)
                return malformed("a field name of more than 256 characters");
            out.push_back(c);
        }
        if (!at('"'))
            return malformed("an unterminated string");
        ++pos_;
        return true;
    }

    void ws() {
        while (pos_ < s_.size() &&
               (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }

    bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

    // Skips whitespace; consumes `c` if it is next.
    bool peek(char c) {
        ws();
        if (!at(c))
            return false;
        ++pos_;
        return true;
    }

    bool expect(char c) {
        ws();
        if (!at(c))
            return malformed(fmt::format("expected '{}'", c));
        ++pos_;
        return true;
    }

    // After an element: true on ',' (another follows), false on `close` or an error (failed_).
    bool comma_or(char close) {
        ws();
        if (at(',')) {
            ++pos_;
            return true;
        }
        if (at(close)) {
            ++pos_;
            return false;
        }
        malformed(fmt::format("expected ',' or '{}'", close));
        return false;
    }

    bool malformed(const std::string& what) {
        if (failed_)
            return false;
        const std::string where =
            pos_ < s_.size() ? fmt::format("at byte {}", pos_) : "at the end of the body";
        return fail("malformed_json", "", -1, fmt::format("malformed JSON {}: {}", where, what));
    }

    bool fail(const char* kind, const std::string& field, int64_t example, std::string message) {
        if (!failed_)
            error_ = ScoreError{kind, field, example, std::move(message)};
        failed_ = true;
        return false;
    }

    std::string_view s_;
    size_t pos_ = 0;
    const ScoreSchema& schema_;
    ScoreRequest& out_;
    ScoreError& error_;
    bool failed_ = false;
    std::unordered_map<std::string, int> feature_index_;
};

}  // namespace

bool parse_score_request(std::string_view body,
                         const ScoreSchema& schema,
                         ScoreRequest& out,
                         ScoreError& error) {
    return Parser(body, schema, out, error).parse();
}

std::string score_error_json(const ScoreError& error) {
    return fmt::format(R"({{"error":{{"kind":{},"field":{},"example":{},"message":{}}}}})",
                       json_quote(error.kind), json_quote(error.field), error.example,
                       json_quote(error.message));
}

}  // namespace shardrec::data
