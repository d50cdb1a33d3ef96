// How the ranks of a checkpoint save or load agree: strings gathered over the group, and one
// failing rank failing them all with its message.
#include "engine/train/checkpoint_collective.h"

#include <algorithm>

namespace shardrec::train {

// Every rank's string, in rank order, on every rank.
std::vector<std::string> gather_strings(comm::ProcessGroup* pg, const std::string& s) {
    if (pg == nullptr || pg->size() == 1)
        return {s};
    const int world = pg->size();
    const std::vector<int64_t> ones(static_cast<size_t>(world), 1);
    Tensor len = Tensor::from_vector<int64_t>({static_cast<int64_t>(s.size())});
    Tensor lens = Tensor::empty({world}, DType::kI64);
    pg->all_gather_v(len, lens, ones).wait();
    const std::vector<int64_t> splits = lens.to_vector<int64_t>();
    int64_t total = 0;
    for (int64_t n : splits)
        total += n;
    Tensor mine = Tensor::empty({static_cast<int64_t>(s.size())}, DType::kU8);
    std::copy(s.begin(), s.end(), mine.data<uint8_t>());
    Tensor all = Tensor::empty({total}, DType::kU8);
    pg->all_gather_v(mine, all, splits).wait();
    std::vector<std::string> out;
    const char* p = reinterpret_cast<const char*>(all.data<uint8_t>());
    for (int64_t n : splits) {
        out.emplace_back(p, static_cast<size_t>(n));
        p += n;
    }
    return out;
}

// Runs f on this rank, then every rank learns whether any rank failed and all throw the first
// failing rank's message (after on_error), so no rank is left waiting in a collective.
void together(comm::ProcessGroup* pg,
              const std::function<void()>& f,
              const std::function<void()>& on_error) {
    std::string error;
    try {
        f();
    } catch (const std::exception& e) {
        error = e.what();
        if (error.empty())
            error = "unknown error";
    }
    for (const std::string& e : gather_strings(pg, error)) {
        if (!e.empty()) {
            if (on_error)
                on_error();
            throw Error(e);
        }
    }
}

}  // namespace shardrec::train
