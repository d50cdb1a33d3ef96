// TorchRec dist_data in one include: the input dist of sparse features (KJTAllToAll, with
// bucketize_kjt_before_all2all for row-wise sharding) and the output dists of pooled
// (PooledEmbeddingsAllToAll, PooledEmbeddingsReduceScatter, PooledEmbeddingsAllGather) and
// sequence embeddings (SequenceEmbeddingsAllToAll). Each concept has its own header.
#pragma once

#include "engine/distributed/bucketize.h"
#include "engine/distributed/comm_ops.h"
#include "engine/distributed/kjt_all_to_all.h"
#include "engine/distributed/permute_sparse_data.h"
#include "engine/distributed/pooled_embeddings.h"
#include "engine/distributed/sequence_embeddings.h"
