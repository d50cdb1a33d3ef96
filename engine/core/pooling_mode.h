// How an embedding bag pools its rows (TorchRec PoolingType). A plain enum with no engine
// dependency, so the float64 reference in test/reference/ can use it too.
#pragma once

namespace shardrec {

// kSum: sum_i w_i * E[id_i]. kMean: that sum divided by the bag length L (also when weighted, as
// TorchRec does); an empty bag pools to zeros in both modes.
enum class PoolingMode { kSum, kMean };

inline const char* pooling_mode_name(PoolingMode mode) {
    return mode == PoolingMode::kSum ? "sum" : "mean";
}

}  // namespace shardrec
