// Compiled instead of kernels/cuda/*.cu in a build without CUDA: every cuda:: kernel entry throws
// "built without CUDA". Forgetting an entry is a link error in the CPU-only build, which CI runs;
// the CUDA build links the .cu definitions alone, so a missing one is a link error there too.
#include "engine/core/error.h"
#include "kernels/bce_with_logits.h"
#include "kernels/cache_rows.h"
#include "kernels/crossnet.h"
#include "kernels/dense_optimizer.h"
#include "kernels/device_ceilings.h"
#include "kernels/dot_interaction.h"
#include "kernels/elementwise.h"
#include "kernels/embedding_bag.h"
#include "kernels/embedding_init.h"
#include "kernels/factorization_machine.h"
#include "kernels/jagged.h"
#include "kernels/linear.h"
#include "kernels/mixture_crossnet.h"
#include "kernels/qcomm_codec.h"
#include "kernels/quant_embedding_bag.h"
#include "kernels/sequence_embedding.h"
#include "kernels/swish_layer_norm.h"
#include "kernels/vector_crossnet.h"

namespace shardrec::kernels::cuda {
namespace {

[[noreturn, maybe_unused]] void throw_not_built(const char* what) {
    SR_CHECK(false, "{}: no CUDA definition in this build", what);
    throw Error(what);
}

}  // namespace

// One definition per cuda:: entry declared in kernels/*.h, in op order (kernels/ops.h).

// ---- embedding lookups: pooled and sequence, forward and backward ----
void embedding_bag_forward(const Tensor&,
                           const Tensor&,
                           const Tensor&,
                           const Tensor&,
                           const Tensor&,
                           const Tensor*,
                           PoolingMode,
                           Tensor&,
                           Stream&) {
    throw_not_built("cuda::embedding_bag_forward");
}

void quant_embedding_bag_forward(const Tensor&,
                                 const Tensor&,
                                 const Tensor&,
                                 const Tensor&,
                                 const Tensor&,
                                 const Tensor&,
                                 const Tensor&,
                                 const Tensor*,
                                 PoolingMode,
                                 Tensor&,
                                 Stream&) {
    throw_not_built("cuda::quant_embedding_bag_forward");
}

void embedding_bag_backward(const Tensor&,
                            const Tensor&,
                            const Tensor&,
                            const Tensor&,
                            const Tensor&,
                            const Tensor&,
                            const Tensor*,
                            PoolingMode,
                            Tensor*,
                            Tensor*,
                            EmbeddingBackwardWorkspace&,
                            Stream&) {
    throw_not_built("cuda::embedding_bag_backward");
}

void embedding_bag_backward_fused(const Tensor&,
                                  const Tensor&,
                                  const Tensor&,
                                  const Tensor&,
                                  const Tensor&,
                                  const Tensor*,
                                  PoolingMode,
                                  const FusedOptimizerParams&,
                                  Tensor&,
                                  Tensor*,
                                  Tensor*,
                                  EmbeddingBackwardWorkspace&,
                                  Stream&) {
    throw_not_built("cuda::embedding_bag_backward_fused");
}

void sequence_embedding_forward(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::sequence_embedding_forward");
}

void sequence_embedding_backward_fused(const Tensor&,
                                       const Tensor&,
                                       const Tensor&,
                                       const Tensor&,
                                       const Tensor&,
                                       const FusedOptimizerParams&,
                                       Tensor&,
                                       Tensor*,
                                       Tensor*,
                                       EmbeddingBackwardWorkspace&,
                                       Stream&) {
    throw_not_built("cuda::sequence_embedding_backward_fused");
}

// ---- dense ops: linear, interactions, cross nets, norms, loss, dense optimizers ----
bool cublas_loaded() {
    return false;
}

int load_cublas() {
    throw_not_built("cuda::load_cublas");
}

void linear_forward(const Tensor&, const Tensor&, const Tensor*, Activation, Tensor&, Stream&) {
    throw_not_built("cuda::linear_forward");
}

void linear_backward(const Tensor&,
                     const Tensor&,
                     const Tensor&,
                     const Tensor&,
                     Activation,
                     Tensor*,
                     Tensor&,
                     Tensor*,
                     Stream&) {
    throw_not_built("cuda::linear_backward");
}

void dot_interaction_forward(const Tensor&, const Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::dot_interaction_forward");
}

void dot_interaction_backward(
    const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::dot_interaction_backward");
}

void crossnet_forward(const Tensor&,
                      const Tensor&,
                      const Tensor&,
                      const Tensor*,
                      const Tensor&,
                      Tensor&,
                      Tensor&,
                      Tensor*,
                      Stream&) {
    throw_not_built("cuda::crossnet_forward");
}

void crossnet_backward(const Tensor&,
                       const Tensor&,
                       const Tensor&,
                       const Tensor*,
                       const Tensor&,
                       const Tensor*,
                       const Tensor&,
                       Tensor&,
                       Tensor&,
                       Tensor&,
                       Tensor*,
                       Tensor&,
                       Stream&) {
    throw_not_built("cuda::crossnet_backward");
}

void vector_crossnet_forward(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::vector_crossnet_forward");
}

void vector_crossnet_backward(const Tensor&,
                              const Tensor&,
                              const Tensor&,
                              const Tensor&,
                              const Tensor&,
                              Tensor&,
                              Tensor&,
                              Tensor&,
                              Tensor&,
                              Stream&) {
    throw_not_built("cuda::vector_crossnet_backward");
}

void mixture_crossnet_forward(const Tensor&,
                              const Tensor&,
                              const MixtureCrossNetWeights&,
                              Activation,
                              Tensor&,
                              const MixtureCrossNetSaved&,
                              Stream&) {
    throw_not_built("cuda::mixture_crossnet_forward");
}

void mixture_crossnet_backward(const Tensor&,
                               const Tensor&,
                               const MixtureCrossNetWeights&,
                               Activation,
                               const MixtureCrossNetSaved&,
                               const Tensor&,
                               const MixtureCrossNetGrads&,
                               Stream&) {
    throw_not_built("cuda::mixture_crossnet_backward");
}

void swish_layer_norm_forward(
    const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::swish_layer_norm_forward");
}

void swish_layer_norm_backward(const Tensor&,
                               const Tensor&,
                               const Tensor&,
                               const Tensor&,
                               const Tensor&,
                               const Tensor&,
                               Tensor&,
                               Tensor&,
                               Tensor&,
                               Stream&) {
    throw_not_built("cuda::swish_layer_norm_backward");
}

void factorization_machine_forward(const Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::factorization_machine_forward");
}

void factorization_machine_backward(const Tensor&, const Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::factorization_machine_backward");
}

void bce_with_logits(const Tensor&, const Tensor&, Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::bce_with_logits");
}

void sgd_update(Tensor&, const Tensor&, float, float, Stream&) {
    throw_not_built("cuda::sgd_update");
}

void adagrad_update(Tensor&, const Tensor&, Tensor&, float, float, float, Stream&) {
    throw_not_built("cuda::adagrad_update");
}

void adam_update(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamHyperParams&, Stream&) {
    throw_not_built("cuda::adam_update");
}

// ---- jagged ops ----
void asynchronous_complete_cumsum(const Tensor&, Tensor&, Stream&) {
    throw_not_built("cuda::asynchronous_complete_cumsum");
}

void permute_sparse_data(const Tensor&,
                         const Tensor&,
                         const Tensor&,
                         const Tensor&,
                         const Tensor*,
                         Tensor&,
                         Tensor&,
                         Tensor*,
                         Stream&) {
    throw_not_built("cuda::permute_sparse_data");
}

void block_bucketize_sparse_features(const Tensor&,
                                     const Tensor&,
                                     const Tensor&,
                                     int64_t,
                                     const Tensor*,
                                     bool,
                                     Tensor&,
                                     Tensor&,
                                     Tensor*,
                                     Tensor*,
                                     Stream&) {
    throw_not_built("cuda::block_bucketize_sparse_features");
}

// ---- benchmark ceilings (kernels/device_ceilings.h) ----
double measure_copy_gbps(int, size_t, int) {
    throw_not_built("cuda::measure_copy_gbps");
}

double measure_gather_gbps(int, int64_t, size_t, int64_t, int) {
    throw_not_built("cuda::measure_gather_gbps");
}

double sgemm_time_us(int, int64_t, int64_t, int64_t, int) {
    throw_not_built("cuda::sgemm_time_us");
}

void add_(Tensor&, const Tensor&, Stream&) {
    throw_not_built("cuda::add_");
}

void fill_(Tensor&, float, Stream&) {
    throw_not_built("cuda::fill_");
}

void fill_rows(const FillRows&, Stream&) {
    throw_not_built("cuda::fill_rows");
}

void columns_axpy(const ColumnsAxpy&, Stream&) {
    throw_not_built("cuda::columns_axpy");
}

void embedding_init(Tensor&, const EmbeddingInit&, Stream&) {
    throw_not_built("cuda::embedding_init");
}

void cache_rows_pack(const CacheRowsArgs&, Stream&) {
    throw_not_built("cuda::cache_rows_pack");
}

void cache_rows_unpack(const CacheRowsArgs&, Stream&) {
    throw_not_built("cuda::cache_rows_unpack");
}

void qcomm_encode(const float*, int64_t, int64_t, CommType, uint8_t*, Stream&) {
    throw_not_built("cuda::qcomm_encode");
}

void qcomm_decode(const uint8_t*, int64_t, int64_t, CommType, float*, Stream&) {
    throw_not_built("cuda::qcomm_decode");
}

}  // namespace shardrec::kernels::cuda
