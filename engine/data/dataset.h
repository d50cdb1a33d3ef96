// Where training and evaluation samples come from. A Dataset is indexable: sample i of a split is
// a pure function of i, so rank r of world_size reads its slice of global batch `step` as
// batch(step * global_B + r * B, B, split), the union over ranks is what one process reads with
// batch size global_B (sharding invariance), and a resumed run reads exactly what an
// uninterrupted one would (the data position is the step). batch() may be called from a
// prefetch thread while the training thread runs: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sparse/batch.h"

namespace shardrec::data {

enum class Split : uint8_t { kTrain, kEval };  // disjoint samples

class Dataset {
public:
    Dataset() = default;
    Dataset(const Dataset&) = delete;
    Dataset& operator=(const Dataset&) = delete;
    Dataset(Dataset&&) = delete;
    Dataset& operator=(Dataset&&) = delete;
    virtual ~Dataset() = default;

    // Samples [global_start, global_start + count) of `split` (sample i of a finite split is its
    // row i mod num_samples: epochs wrap around). The KJT's keys are feature_names().
    virtual Batch batch(int64_t global_start, int64_t count, Split split) const = 0;

    // The samples of `split`, or -1 for an unbounded (generated) split.
    virtual int64_t num_samples(Split split) const = 0;

    virtual std::vector<std::string> feature_names() const = 0;
};

}  // namespace shardrec::data
