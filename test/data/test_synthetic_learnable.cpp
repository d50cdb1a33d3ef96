// SyntheticDataset: the planted signal is learnable. A logistic model on one-hot ids and the dense
// features (an embedding_dim-1 "DLRM" without the pair term) trained with row-wise Adagrad for 300
// steps of 512 must reach eval AUC >= 0.75, the bar the DLRM end-to-end tests rely on.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/data/synthetic.h"
#include "engine/train/metrics.h"
#include "test/support/compare.h"

using namespace shardrec;
using namespace shardrec::data;

namespace {

struct OneHotLogistic {
    std::vector<std::vector<double>> rows, rows_g2;  // [T][E] weight, Adagrad state
    std::vector<double> dense, dense_g2;             // [num_dense]
    double bias = 0, bias_g2 = 0;

    explicit OneHotLogistic(const SyntheticSpec& spec)
        : dense(spec.num_dense, 0.0), dense_g2(spec.num_dense, 0.0) {
        for (const auto& table : spec.tables) {
            rows.emplace_back(table.num_embeddings, 0.0);
            rows_g2.emplace_back(table.num_embeddings, 0.0);
        }
    }

    // logits[b] for every sample of the batch.
    std::vector<float> forward(const Batch& batch) const {
        const int64_t count = batch.batch_size();
        const int64_t num_dense = batch.dense.size(1);
        const int64_t* off = batch.sparse.offsets().data<int64_t>();
        const int64_t* ids = batch.sparse.values().data<int64_t>();
        const float* w =
            batch.sparse.weights_or_none() ? batch.sparse.weights().data<float>() : nullptr;
        std::vector<float> logits(static_cast<size_t>(count));
        for (int64_t b = 0; b < count; ++b) {
            double z = bias;
            for (int64_t j = 0; j < num_dense; ++j) {
                z += dense[j] * batch.dense.data<float>()[b * num_dense + j];
            }
            for (size_t t = 0; t < rows.size(); ++t) {
                const int64_t bag = static_cast<int64_t>(t) * count + b;
                for (int64_t k = off[bag]; k < off[bag + 1]; ++k) {
                    z += rows[t][ids[k]] * (w ? w[k] : 1.0f);
                }
            }
            logits[b] = static_cast<float>(z);
        }
        return logits;
    }

    void step(const Batch& batch, double lr) {
        const std::vector<float> logits = forward(batch);
        const int64_t count = batch.batch_size();
        const int64_t num_dense = batch.dense.size(1);
        const int64_t* off = batch.sparse.offsets().data<int64_t>();
        const int64_t* ids = batch.sparse.values().data<int64_t>();
        const float* w =
            batch.sparse.weights_or_none() ? batch.sparse.weights().data<float>() : nullptr;
        auto adagrad = [lr](double& x, double& g2, double g) {
            g2 += g * g;
            x -= lr * g / (std::sqrt(g2) + 1e-8);
        };
        std::vector<double> dense_grad(dense.size(), 0.0);
        double bias_grad = 0;
        for (int64_t b = 0; b < count; ++b) {
            const double err = 1.0 / (1.0 + std::exp(-logits[b])) - batch.labels.data<float>()[b];
            bias_grad += err / count;
            for (int64_t j = 0; j < num_dense; ++j) {
                dense_grad[j] += err * batch.dense.data<float>()[b * num_dense + j] / count;
            }
            for (size_t t = 0; t < rows.size(); ++t) {
                const int64_t bag = static_cast<int64_t>(t) * count + b;
                for (int64_t k = off[bag]; k < off[bag + 1]; ++k) {
                    adagrad(rows[t][ids[k]], rows_g2[t][ids[k]], err * (w ? w[k] : 1.0f));
                }
            }
        }
        adagrad(bias, bias_g2, bias_grad);
        for (size_t j = 0; j < dense.size(); ++j) {
            adagrad(dense[j], dense_g2[j], dense_grad[j]);
        }
    }
};

}  // namespace

TEST_CASE("SyntheticDataset: a one-hot logistic model learns the signal to eval AUC >= 0.75",
          "[data]") {
    SyntheticSpec spec;
    spec.seed = test::test_seed();
    for (int t = 0; t < 26; ++t) {
        SyntheticTable table;
        table.feature_name = "cat_" + std::to_string(t);
        table.num_embeddings = 1000 + 500 * (t % 7);
        table.pooling_factor = t % 5 == 0 ? 3.0 : 1.0;
        spec.tables.push_back(table);
    }
    const SyntheticDataset ds(spec);
    OneHotLogistic model(spec);
    const int64_t batch_size = 512;
    for (int64_t step = 0; step < 300; ++step) {
        model.step(ds.batch(step * batch_size, batch_size, Split::kTrain), 0.1);
    }
    train::MetricsAccumulator eval;
    for (int64_t i = 0; i < 20; ++i) {
        const Batch batch = ds.batch(i * batch_size, batch_size, Split::kEval);
        eval.add(model.forward(batch).data(), batch.labels.data<float>(), batch_size);
    }
    const train::Metrics m = eval.compute();
    INFO("seed " << spec.seed << " eval auc " << m.auc << " ne " << m.ne);
    CHECK(m.auc >= 0.75);
    CHECK(m.ne < 0.9);
}
