// TorchRec state_dict names and layouts for export and import, and the safetensors reader.
#include "engine/train/torchrec_interop.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "kernels/dot_interaction.h"

namespace shardrec::train {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

bool has(const NamedTensors& dense, const std::string& name) {
    return find_tensor(dense, name) != nullptr;
}

// Layers "<prefix>._mlp.<i>._linear.weight" of an MLP among the parameters.
int64_t mlp_layers(const NamedTensors& dense, const std::string& prefix) {
    int64_t n = 0;
    while (has(dense, prefix + "._mlp." + std::to_string(n) + "._linear.weight"))
        ++n;
    return n;
}

// SimpleDeepFMNN's one shape: bottom MLP of 2 layers, deep part of 1, no hidden over-arch layer.
bool simple_deepfm_shape(const NamedTensors& dense) {
    return mlp_layers(dense, "dense_arch.model") == 2 &&
           mlp_layers(dense, "inter_arch.deep_fm.dense_module") == 1 &&
           mlp_layers(dense, "over_arch.model") == 0;
}

// "<prefix>._mlp.<i>._linear.<rest>" -> "<prefix>.<2 i>.<rest>" (nn.Sequential(Linear, ReLU, ..)).
std::string sequential_name(const std::string& name, const std::string& prefix) {
    const std::string head = prefix + "._mlp.";
    if (!starts_with(name, head))
        return name;
    const size_t dot = name.find('.', head.size());
    const int64_t i = std::stoll(name.substr(head.size(), dot - head.size()));
    const std::string rest = name.substr(dot + 1);  // _linear.weight
    return prefix + "." + std::to_string(2 * i) + rest.substr(std::strlen("_linear"));
}

// The name of the dlrm over arch's first layer weight: its columns are the interaction's.
std::string first_over_weight(const NamedTensors& dense) {
    return has(dense, "over_arch.model._mlp.0._linear.weight")
               ? "over_arch.model._mlp.0._linear.weight"
               : "over_arch.final._linear.weight";
}

// F from the over arch's input width D + F(F+1)/2.
int64_t features_from_width(int64_t width, int64_t D, const std::string& name) {
    const int64_t P = width - D;
    int64_t F = 0;
    while (F * (F + 1) / 2 < P)
        ++F;
    SR_CHECK(F * (F + 1) / 2 == P,
             "{} has {} columns, not D + F(F+1)/2 for the embedding dim D = {} and any F", name,
             width, D);
    return F;
}

// out[:, D + k] = in[:, D + cols[k]] (to TorchRec), or out[:, D + cols[k]] = in[:, D + k].
Tensor permute_interaction_columns(const Tensor& in, int64_t D, bool to_torchrec) {
    const int64_t H = in.size(0), W = in.size(1);
    const std::vector<int64_t> cols =
        torchrec_interaction_columns(features_from_width(W, D, "the over arch's first layer"));
    Tensor out = in.clone();
    const float* src = in.data<float>();
    float* dst = out.data<float>();
    for (int64_t r = 0; r < H; ++r) {
        for (size_t k = 0; k < cols.size(); ++k) {
            const int64_t a = r * W + D + static_cast<int64_t>(k), b = r * W + D + cols[k];
            if (to_torchrec) {
                dst[a] = src[b];
            } else {
                dst[b] = src[a];
            }
        }
    }
    return out;
}

// ---- a JSON reader for the safetensors header (objects, arrays, strings, integers) ----

struct Json {
    enum class Kind { kObject, kArray, kString, kNumber, kOther } kind = Kind::kOther;
    std::string str;
    int64_t num = 0;
    std::vector<std::pair<std::string, Json>> items;  // object members or array elements
};

class JsonReader {
public:
    JsonReader(const std::string& text, const std::string& source) : s_(text), source_(source) {}

    Json read_document() {
        Json v = value(0);
        skip_space();
        check(at_ == s_.size(), "text after the header's object");
        return v;
    }

private:
    void check(bool ok, const char* what) const {
        SR_CHECK(ok, "{}: malformed safetensors header at byte {}: {}", source_, 8 + at_, what);
    }

    void skip_space() {
        while (at_ < s_.size() && std::strchr(" \t\r\n", s_[at_]) != nullptr)
            ++at_;
    }

    char peek() {
        skip_space();
        check(at_ < s_.size(), "unexpected end");
        return s_[at_];
    }

    void expect(char c) {
        check(peek() == c, "unexpected character");
        ++at_;
    }

    std::string string() {
        expect('"');
        std::string out;
        while (true) {
            check(at_ < s_.size(), "unterminated string");
            const char c = s_[at_++];
            if (c == '"')
                return out;
            if (c == '\\') {
                check(at_ < s_.size(), "unterminated string");
                const char e = s_[at_++];
                check(e != 'u', "\\u escapes are not supported in names");
                out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
            } else {
                out += c;
            }
        }
    }

    Json value(int depth) {
        check(depth < 8, "nested too deeply");
        Json v;
        const char c = peek();
        if (c == '{' || c == '[') {
            const bool object = c == '{';
            v.kind = object ? Json::Kind::kObject : Json::Kind::kArray;
            ++at_;
            if (peek() == (object ? '}' : ']')) {
                ++at_;
                return v;
            }
            while (true) {
                std::string key;
                if (object) {
                    key = string();
                    expect(':');
                }
                v.items.emplace_back(key, value(depth + 1));
                if (peek() == ',') {
                    ++at_;
                    continue;
                }
                expect(object ? '}' : ']');
                return v;
            }
        }
        if (c == '"') {
            v.kind = Json::Kind::kString;
            v.str = string();
            return v;
        }
        const size_t begin = at_;
        while (at_ < s_.size() && std::strchr(",}] \t\r\n", s_[at_]) == nullptr)
            ++at_;
        const std::string word = s_.substr(begin, at_ - begin);
        check(!word.empty(), "empty value");
        if (word.find_first_not_of("0123456789") == std::string::npos) {
            check(word.size() <= 18, "integer too large");
            v.kind = Json::Kind::kNumber;
            v.num = std::stoll(word);
        }
        return v;  // true, false, null, non-integers: kOther, never needed
    }

    const std::string& s_;
    const std::string& source_;
    size_t at_ = 0;
};

DType safetensors_dtype_of(const std::string& name, const std::string& source) {
    static const std::map<std::string, DType> kTypes = {{"F32", DType::kF32},
                                                        {"F16", DType::kF16},
                                                        {"BF16", DType::kBF16},
                                                        {"I32", DType::kI32},
                                                        {"I64", DType::kI64}};
    const auto it = kTypes.find(name);
    SR_CHECK(it != kTypes.end(), "{}: safetensors dtype {} is not read (F32, F16, BF16, I32, I64)",
             source, name);
    return it->second;
}

}  // namespace

const Tensor* find_tensor(const NamedTensors& all, const std::string& name) {
    for (const auto& [n, t] : all) {
        if (n == name)
            return &t;
    }
    return nullptr;
}

std::string torchrec_model_class(const std::string& model_type) {
    if (model_type == "dlrm")
        return "torchrec.models.dlrm.DLRM";
    if (model_type == "dlrm_dcn")
        return "torchrec.models.dlrm.DLRM_DCN";
    if (model_type == "deepfm")
        return "torchrec.models.deepfm.SimpleDeepFMNN";
    SR_CHECK(false, "model type '{}' has no TorchRec counterpart", model_type);
    return "";
}

std::string torchrec_shape_problem(const std::string& model_type, const NamedTensors& dense) {
    if (model_type == "deepfm") {
        return simple_deepfm_shape(dense)
                   ? ""
                   : "SimpleDeepFMNN has a bottom_mlp of 2 layers, a deepfm.hidden of 1 layer "
                     "and a top_mlp of [1]";
    }
    return mlp_layers(dense, "over_arch.model") > 0
               ? ""
               : "TorchRec's OverArch needs a top_mlp of at least 2 layers";
}

std::string torchrec_name(const std::string& model_type,
                          const std::string& name,
                          const NamedTensors& dense) {
    if (model_type == "deepfm" && simple_deepfm_shape(dense)) {
        if (starts_with(name, "over_arch.final._linear."))
            return "over_arch.model.0." + name.substr(std::strlen("over_arch.final._linear."));
        for (const char* prefix : {"dense_arch.model", "inter_arch.deep_fm.dense_module"}) {
            if (starts_with(name, std::string(prefix) + "._mlp."))
                return sequential_name(name, prefix);
        }
        return name;
    }
    if (starts_with(name, "over_arch.model._mlp."))
        return "over_arch.model.0." + name.substr(std::strlen("over_arch.model."));
    if (starts_with(name, "over_arch.final._linear."))
        return "over_arch.model.1." + name.substr(std::strlen("over_arch.final._linear."));
    return name;
}

std::vector<int64_t> torchrec_interaction_columns(int64_t num_sparse_features) {
    std::vector<int64_t> cols;
    // torch.triu_indices(F + 1, F + 1, offset=1): row-major pairs (i, j), i < j.
    for (int64_t i = 0; i <= num_sparse_features; ++i) {
        for (int64_t j = i + 1; j <= num_sparse_features; ++j)
            cols.push_back(kernels::dot_interaction_pair_index(j, i));
    }
    return cols;
}

NamedTensors dense_to_torchrec(const std::string& model_type,
                               int64_t embedding_dim,
                               const NamedTensors& dense) {
    const std::string permuted = model_type == "dlrm" ? first_over_weight(dense) : "";
    NamedTensors out;
    for (const auto& [name, t] : dense) {
        out.emplace_back(
            torchrec_name(model_type, name, dense),
            name == permuted ? permute_interaction_columns(t, embedding_dim, true) : t);
    }
    return out;
}

void dense_from_torchrec(const std::string& model_type,
                         int64_t embedding_dim,
                         const NamedTensors& state,
                         const std::string& source,
                         NamedTensors& dense) {
    std::map<std::string, const Tensor*> by_name;
    for (const auto& [name, t] : state)
        by_name[name] = &t;
    const std::string permuted = model_type == "dlrm" ? first_over_weight(dense) : "";
    for (auto& [name, t] : dense) {
        const std::string theirs = torchrec_name(model_type, name, dense);
        const auto it = by_name.find(theirs);
        SR_CHECK(it != by_name.end(), "{}: no tensor '{}' {}, which the {} of this config has",
                 source, theirs, t.str(), torchrec_model_class(model_type));
        const Tensor& src = *it->second;
        SR_CHECK(src.shape() == t.shape() && src.dtype() == t.dtype(),
                 "{}: '{}' is {} in the file, {} in this config's model", source, theirs, src.str(),
                 t.str());
        t.copy_from(name == permuted ? permute_interaction_columns(src, embedding_dim, false)
                                     : src);
        by_name.erase(it);
    }
    for (const auto& [name, t] : by_name) {
        SR_CHECK(starts_with(name, "sparse_arch."),
                 "{}: '{}' {} is not a parameter of this config's {} (another model?)", source,
                 name, t->str(), torchrec_model_class(model_type));
    }
}

NamedTensors read_safetensors(const std::string& path) {
    std::ifstream in = open_input_file(path, "the safetensors file");
    in.seekg(0, std::ios::end);
    const auto file_size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    unsigned char size_bytes[8] = {};
    in.read(reinterpret_cast<char*>(size_bytes), 8);
    SR_CHECK(in.gcount() == 8, "{}: not a safetensors file (shorter than 8 bytes)", path);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i)
        header_size = (header_size << 8) | size_bytes[i];
    SR_CHECK(header_size <= file_size - 8 && header_size < (uint64_t{1} << 30),
             "{}: not a safetensors file (header of {} bytes in a file of {})", path, header_size,
             file_size);
    std::string header(header_size, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_size));
    const Json doc = JsonReader(header, path).read_document();
    SR_CHECK(doc.kind == Json::Kind::kObject, "{}: the safetensors header is not an object", path);
    const uint64_t data_size = file_size - 8 - header_size;
    NamedTensors out;
    for (const auto& [name, entry] : doc.items) {
        if (name == "__metadata__")
            continue;
        const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
        for (const auto& [key, v] : entry.items) {
            if (key == "dtype") {
                dtype = &v;
            } else if (key == "shape") {
                shape = &v;
            } else if (key == "data_offsets") {
                offsets = &v;
            }
        }
        SR_CHECK(dtype && dtype->kind == Json::Kind::kString && shape &&
                     shape->kind == Json::Kind::kArray && offsets &&
                     offsets->kind == Json::Kind::kArray && offsets->items.size() == 2,
                 "{}: tensor '{}' lacks dtype, shape or data_offsets", path, name);
        Shape dims;
        for (const auto& [k, d] : shape->items) {
            SR_CHECK(d.kind == Json::Kind::kNumber, "{}: tensor '{}' has a bad shape", path, name);
            dims.push_back(d.num);
        }
        const auto begin = static_cast<uint64_t>(offsets->items[0].second.num);
        const auto end = static_cast<uint64_t>(offsets->items[1].second.num);
        Tensor t = Tensor::empty(dims, safetensors_dtype_of(dtype->str, path));
        SR_CHECK(begin <= end && end <= data_size && end - begin == t.nbytes(),
                 "{}: tensor '{}' {} has data_offsets [{}, {}] in {} bytes of data", path, name,
                 t.str(), begin, end, data_size);
        in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
        in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
        SR_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()), "{}: cannot read '{}'",
                 path, name);
        out.emplace_back(name, std::move(t));
    }
    return out;
}

}  // namespace shardrec::train
