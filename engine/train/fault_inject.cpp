#include "engine/train/fault_inject.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "comm/mpi_work.h"
#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::train {

std::vector<Fault> parse_faults(const std::string& spec) {
    std::vector<Fault> faults;
    std::stringstream items(spec);
    std::string item;
    while (std::getline(items, item, ',')) {
        if (item.empty()) {
            continue;
        }
        const size_t a = item.find(':');
        const size_t b = a == std::string::npos ? a : item.find(':', a + 1);
        SR_CHECK(b != std::string::npos,
                 "SHARDREC_FAULT_INJECT: '{}' is not RANK:STEP:KIND (KIND: stall, exit, "
                 "held_wait, nan_dense, bad_id, eval_error)",
                 item);
        Fault f;
        const std::string rank = item.substr(0, a);
        const std::string step = item.substr(a + 1, b - a - 1);
        const std::string kind = item.substr(b + 1);
        char* end = nullptr;
        if (rank != "*") {
            f.rank = static_cast<int>(std::strtol(rank.c_str(), &end, 10));
            SR_CHECK(!rank.empty() && *end == '\0' && f.rank >= 0,
                     "SHARDREC_FAULT_INJECT: rank '{}' in '{}' is not a rank or *", rank, item);
        }
        f.step = std::strtoll(step.c_str(), &end, 10);
        SR_CHECK(!step.empty() && *end == '\0' && f.step >= 1,
                 "SHARDREC_FAULT_INJECT: step '{}' in '{}' is not a step >= 1", step, item);
        if (kind == "stall") {
            f.kind = Fault::Kind::kStall;
        } else if (kind == "exit") {
            f.kind = Fault::Kind::kExit;
        } else if (kind == "held_wait") {
            f.kind = Fault::Kind::kHeldWait;
        } else if (kind == "nan_dense") {
            f.kind = Fault::Kind::kNanDense;
        } else if (kind == "bad_id") {
            f.kind = Fault::Kind::kBadId;
        } else if (kind == "eval_error") {
            f.kind = Fault::Kind::kEvalError;
        } else {
            SR_CHECK(false,
                     "SHARDREC_FAULT_INJECT: kind '{}' in '{}' is not stall, exit, held_wait, "
                     "nan_dense, bad_id or eval_error",
                     kind, item);
        }
        faults.push_back(f);
    }
    return faults;
}

namespace {

std::vector<Fault> faults_from_env() {
    const char* spec = std::getenv("SHARDREC_FAULT_INJECT");
    return spec == nullptr ? std::vector<Fault>{} : parse_faults(spec);
}

}  // namespace

FaultInjector::FaultInjector(const ModelConfig& model) : FaultInjector(model, faults_from_env()) {}

FaultInjector::FaultInjector(const ModelConfig& model, std::vector<Fault> faults)
    : faults_(std::move(faults)) {
    for (const auto& table : model.tables) {
        for (const auto& feature : table.feature_names) {
            features_.push_back(feature);
            rows_.push_back(table.num_embeddings);
        }
    }
}

void FaultInjector::before_eval(int64_t step, int rank) const {
    for (const Fault& f : faults_) {
        SR_CHECK(
            f.kind != Fault::Kind::kEvalError || f.step != step || (f.rank >= 0 && f.rank != rank),
            "fault injection: the evaluation after train step {} fails", step);
    }
}

void FaultInjector::apply(int64_t step, int rank, Batch& batch) const {
    for (const Fault& f : faults_) {
        if (f.step != step || (f.rank >= 0 && f.rank != rank)) {
            continue;
        }
        switch (f.kind) {
            case Fault::Kind::kStall:
                log::all().warn("fault injection: stalls at train step {}", step);
                std::this_thread::sleep_for(std::chrono::hours(1));
                break;
            case Fault::Kind::kExit:
                log::all().warn("fault injection: exits at train step {}", step);
                log::all().flush();
                std::_Exit(3);
            case Fault::Kind::kHeldWait:
                log::all().warn("fault injection: holds its first wait of train step {}", step);
                comm::hold_next_wait();
                break;
            case Fault::Kind::kNanDense:
                log::all().warn("fault injection: NaN dense feature at train step {}", step);
                batch.dense = batch.dense.clone();
                batch.dense.data<float>()[0] = std::nanf("");
                break;
            case Fault::Kind::kEvalError:  // before_eval
                break;
            case Fault::Kind::kBadId: {
                const KeyedJaggedTensor& kjt = batch.sparse;
                // The first key with an id that a table reads.
                for (int64_t k = 0; k < kjt.num_keys(); ++k) {
                    int64_t rows = -1;
                    for (size_t i = 0; i < features_.size(); ++i) {
                        rows = features_[i] == kjt.keys()[k] ? rows_[i] : rows;
                    }
                    if (rows < 0 || kjt.length_per_key()[k] == 0) {
                        continue;
                    }
                    log::all().warn("fault injection: id {} in feature '{}' at train step {}", rows,
                                    kjt.keys()[k], step);
                    Tensor values = kjt.values().clone();
                    values.data<int64_t>()[kjt.offset_per_key()[k]] = rows;
                    batch.sparse = KeyedJaggedTensor::from_lengths_sync(
                        kjt.keys(), values, kjt.lengths(), kjt.weights_or_none(), kjt.stride());
                    break;
                }
                break;
            }
        }
    }
}

}  // namespace shardrec::train
