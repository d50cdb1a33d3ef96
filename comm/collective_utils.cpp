// Results travel as bytes: a header (failed flag, size) and then the payload, both broadcast from
// the rank that ran the function.
#include "comm/collective_utils.h"

#include <cstring>
#include <exception>

#include "engine/core/error.h"

namespace shardrec::comm {
namespace {

// Broadcasts root's bytes (its error message when failed) and throws on every rank if root failed.
std::string broadcast_bytes(ProcessGroup& pg, int root, std::string bytes, bool failed) {
    std::vector<int64_t> header = {failed ? 1 : 0, static_cast<int64_t>(bytes.size())};
    Tensor header_t = Tensor::from_blob(header.data(), {2}, DType::kI64);
    pg.broadcast(header_t, root).wait();
    bytes.resize(static_cast<size_t>(header[1]));
    Tensor data = Tensor::from_blob(bytes.data(), {header[1]}, DType::kU8);
    pg.broadcast(data, root).wait();
    SR_CHECK(header[0] == 0,
             "invoke_on_rank_and_broadcast_result: the function failed on rank {}: {}", root,
             bytes);
    return bytes;
}

template <typename T>
T invoke_and_broadcast(ProcessGroup& pg,
                       int rank,
                       const std::function<T()>& fn,
                       std::string (*encode)(const T&),
                       T (*decode)(const std::string&)) {
    SR_CHECK(rank >= 0 && rank < pg.size(),
             "invoke_on_rank_and_broadcast_result: rank {} is not in group '{}' (size {})", rank,
             pg.name(), pg.size());
    std::string bytes;
    bool failed = false;
    if (pg.rank() == rank) {
        try {
            bytes = encode(fn());
        } catch (const std::exception& e) {
            bytes = e.what();
            failed = true;
        }
    }
    return decode(broadcast_bytes(pg, rank, std::move(bytes), failed));
}

std::string encode_string(const std::string& s) {
    return s;
}

std::string decode_string(const std::string& s) {
    return s;
}

std::string encode_int64s(const std::vector<int64_t>& v) {
    std::string bytes(v.size() * sizeof(int64_t), '\0');
    if (!v.empty()) {
        std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    return bytes;
}

std::vector<int64_t> decode_int64s(const std::string& bytes) {
    std::vector<int64_t> v(bytes.size() / sizeof(int64_t));
    if (!v.empty()) {
        std::memcpy(v.data(), bytes.data(), v.size() * sizeof(int64_t));
    }
    return v;
}

}  // namespace

bool is_leader(const ProcessGroup* pg, int leader_rank) {
    return pg == nullptr || pg->rank() == leader_rank;
}

std::string invoke_on_rank_and_broadcast_result(ProcessGroup& pg,
                                                int rank,
                                                const std::function<std::string()>& fn) {
    return invoke_and_broadcast<std::string>(pg, rank, fn, encode_string, decode_string);
}

std::vector<int64_t> invoke_on_rank_and_broadcast_result(
    ProcessGroup& pg, int rank, const std::function<std::vector<int64_t>()>& fn) {
    return invoke_and_broadcast<std::vector<int64_t>>(pg, rank, fn, encode_int64s, decode_int64s);
}

std::vector<int64_t> all_gather_int64(ProcessGroup& pg, int64_t value) {
    std::vector<int64_t> all(static_cast<size_t>(pg.size()));
    Tensor input = Tensor::from_blob(&value, {1}, DType::kI64);
    Tensor output = Tensor::from_blob(all.data(), {pg.size()}, DType::kI64);
    pg.all_gather_v(input, output, std::vector<int64_t>(all.size(), 1)).wait();
    return all;
}

}  // namespace shardrec::comm
