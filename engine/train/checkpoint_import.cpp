// ckpt init and ckpt import: an unsharded Trainer built on the CPU, optionally filled from a
// TorchRec state_dict, saved at step 0.
#include "engine/train/checkpoint_import.h"

#include <map>

#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_export.h"
#include "engine/train/trainer.h"

namespace shardrec::train {
namespace {

// The model is built where the initial values are the same as on any device.
Config on_cpu(Config config) {
    config.runtime.device = "cpu";
    return config;
}

}  // namespace

void load_torchrec_state_dict(Trainer& trainer,
                              const NamedTensors& state,
                              const std::string& source) {
    SR_CHECK(trainer.process_group() == nullptr || trainer.process_group()->size() == 1,
             "load_torchrec_state_dict: the trainer must hold its tables unsharded");
    const CheckpointManifest m = describe_trainer(trainer, 0);
    SR_CHECK(!m.tables.empty(), "{}: the model has no tables", source);
    std::map<std::string, const Tensor*> tables;
    for (const auto& [name, t] : state) {
        if (name.rfind("sparse_arch.", 0) == 0)
            tables[name] = &t;
    }
    for (EmbeddingShardState& s : trainer.model().sparse_arch().shard_states()) {
        const CheckpointTable& table = m.tables.at(static_cast<size_t>(s.table));
        const std::string name = table_export_name(table.name);
        const auto it = tables.find(name);
        SR_CHECK(it != tables.end(), "{}: no tensor '{}' for table '{}' [{}, {}]", source, name,
                 table.name, table.num_embeddings, table.embedding_dim);
        const Tensor& src = *it->second;
        SR_CHECK(src.shape() == Shape({table.num_embeddings, table.embedding_dim}) &&
                     src.dtype() == table.dtype,
                 "{}: table '{}' is {} in the file, [{}, {}] {} in this config", source, table.name,
                 src.str(), table.num_embeddings, table.embedding_dim, dtype_name(table.dtype));
        SR_CHECK(s.row_offset == 0 && s.col_offset == 0 && s.rows == table.num_embeddings &&
                     s.cols == table.embedding_dim,
                 "load_torchrec_state_dict: table '{}' is sharded", table.name);
        if (s.cached != nullptr) {  // every row into the store, the state at its start
            s.cached->reset();
            constexpr int64_t kChunkRows = 1 << 16;
            for (int64_t begin = 0; begin < s.rows; begin += kChunkRows) {
                std::vector<int64_t> rows(
                    static_cast<size_t>(std::min(kChunkRows, s.rows - begin)));
                for (size_t i = 0; i < rows.size(); ++i)
                    rows[i] = begin + static_cast<int64_t>(i);
                Tensor initial;
                std::vector<Tensor> states;
                s.cached->read_rows(rows, initial, states);
                s.cached->write_rows(
                    rows, src.slice(begin, begin + static_cast<int64_t>(rows.size())), states);
            }
        } else {
            s.weight.copy_from(src);
        }
        tables.erase(it);
    }
    SR_CHECK(tables.empty(), "{}: '{}' {} is not a table of this config (another model?)", source,
             tables.empty() ? "" : tables.begin()->first,
             tables.empty() ? "" : tables.begin()->second->str());
    NamedTensors dense;
    const auto params = trainer.model().parameters();
    for (Parameter* p : params)
        dense.emplace_back(p->name, p->value);  // shares the buffer: written in place
    dense_from_torchrec(m.model_type, m.tables.front().embedding_dim, state, source, dense);
}

std::string init_checkpoint(const Config& config, const std::string& out_dir) {
    Trainer trainer(on_cpu(config), nullptr);
    return save_checkpoint(trainer, out_dir, 0, 0);
}

std::string import_checkpoint(const std::string& safetensors_path,
                              const Config& config,
                              const std::string& out_dir) {
    const NamedTensors state = read_safetensors(safetensors_path);
    Trainer trainer(on_cpu(config), nullptr);
    load_torchrec_state_dict(trainer, state, safetensors_path);
    return save_checkpoint(trainer, out_dir, 0, 0);
}

}  // namespace shardrec::train
