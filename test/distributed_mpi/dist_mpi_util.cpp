#include "test/distributed_mpi/dist_mpi_util.h"

#include "engine/core/rng.h"
#include "engine/distributed/comm_ops.h"
#include "engine/distributed/permute_sparse_data.h"

namespace shardrec::test {

std::shared_ptr<comm::ProcessGroup> world() {
    return comm::world_process_group();
}

std::shared_ptr<comm::ProcessGroup> pair_group() {
    const auto w = world();
    if (w->size() % 2 != 0) {
        return nullptr;
    }
    return w->split(w->rank() / 2, w->rank(), "pair");
}

Tensor i64(const std::vector<int64_t>& v) {
    return Tensor::from_vector(v);
}

std::vector<int64_t> ivec(const Tensor& t) {
    return t.to_vector<int64_t>();
}

KeyedJaggedTensor RankInput::kjt() const {
    std::vector<int64_t> lengths, values;
    std::vector<float> w;
    for (size_t f = 0; f < keys.size(); ++f) {
        for (int64_t b = 0; b < batch; ++b) {
            lengths.push_back(static_cast<int64_t>(ids[f][b].size()));
            values.insert(values.end(), ids[f][b].begin(), ids[f][b].end());
            if (weighted) {
                w.insert(w.end(), weights[f][b].begin(), weights[f][b].end());
            }
        }
    }
    std::optional<Tensor> wt;
    if (weighted) {
        wt = Tensor::from_vector(w);
    }
    return KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(lengths), wt, batch);
}

RankInput random_rank_input(uint64_t seed, int64_t rank, const RandomKjtSpec& spec) {
    rng::Rng gen(seed, 1000 + static_cast<uint64_t>(rank));
    RankInput in;
    in.weighted = spec.weighted;
    in.batch = gen.randint(spec.min_batch, spec.max_batch + 1);
    int64_t index = 0;
    for (int64_t f = 0; f < spec.num_keys; ++f) {
        in.keys.push_back("f" + std::to_string(f));
        in.ids.emplace_back(static_cast<size_t>(in.batch));
        in.weights.emplace_back(static_cast<size_t>(in.batch));
        for (int64_t b = 0; b < in.batch; ++b) {
            const int64_t len = gen.randint(0, spec.max_len + 1);
            for (int64_t i = 0; i < len; ++i, ++index) {
                in.ids[f][b].push_back(spec.id_range > 0 ? gen.randint(0, spec.id_range)
                                                         : rank * RankInput::kRankIdBase + index);
                in.weights[f][b].push_back(static_cast<float>(gen.randint(1, 9)) * 0.25f);
            }
        }
    }
    return in;
}

std::vector<RankInput> random_inputs(uint64_t seed, int64_t world_size, const RandomKjtSpec& spec) {
    std::vector<RankInput> inputs;
    for (int64_t r = 0; r < world_size; ++r) {
        inputs.push_back(random_rank_input(seed, r, spec));
    }
    return inputs;
}

std::vector<int64_t> random_splits(uint64_t seed, int64_t num_keys, int64_t world_size) {
    rng::Rng gen(seed, 7);
    std::vector<int64_t> splits(static_cast<size_t>(world_size), 0);
    for (int64_t k = 0; k < num_keys; ++k) {
        ++splits[gen.randint(0, world_size)];
    }
    return splits;
}

ExpectedKjt expected_kjt_all_to_all(const std::vector<RankInput>& inputs,
                                    const std::vector<int64_t>& splits,
                                    int64_t me,
                                    int64_t stagger) {
    const auto world_size = static_cast<int64_t>(inputs.size());
    int64_t key_begin = 0;
    for (int64_t r = 0; r < me; ++r) {
        key_begin += splits[r];
    }
    ExpectedKjt out;
    const std::vector<int64_t> order = recat_rank_order(world_size, stagger);
    for (const RankInput& in : inputs) {
        out.stride += in.batch;
    }
    for (int64_t k = key_begin; k < key_begin + splits[me]; ++k) {
        out.keys.push_back(inputs[0].keys[k]);
        for (int64_t s : order) {
            const RankInput& in = inputs[s];
            for (int64_t b = 0; b < in.batch; ++b) {
                out.lengths.push_back(static_cast<int64_t>(in.ids[k][b].size()));
                out.values.insert(out.values.end(), in.ids[k][b].begin(), in.ids[k][b].end());
                if (in.weighted) {
                    out.weights.insert(out.weights.end(), in.weights[k][b].begin(),
                                       in.weights[k][b].end());
                }
            }
        }
    }
    return out;
}

GradientDivisionScope::GradientDivisionScope(bool on) : saved_(gradient_division()) {
    set_gradient_division(on);
}

GradientDivisionScope::~GradientDivisionScope() {
    set_gradient_division(saved_);
}

}  // namespace shardrec::test
