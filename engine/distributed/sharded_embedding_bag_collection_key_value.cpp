// Sharded EmbeddingBagCollection: the cached shards (key_value, fused_uvm_caching), filled before
// a batch's lookups (prefetch) or beside the batch before (prefetch_ahead, the prefetch pipeline).
#include <sys/statvfs.h>

#include "engine/core/log.h"
#include "engine/core/memory_limits.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/sharded_embedding_bag_collection_impl.h"

namespace shardrec {

// The key_value files grow with the rows written; said at the start when the disk could not
// hold all of them (a run that writes fewer, as most do, never needs it).
void ShardedEmbeddingBagCollection::warn_if_disk_short() const {
    const int64_t full = sum_over_caches(&CachedEmbeddingShard::full_disk_bytes);

    struct statvfs fs {};

    if (full == 0 || ::statvfs(storage_dir_.c_str(), &fs) != 0)
        return;
    const auto free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    if (full > free_bytes) {
        log::all().warn(
            "key_value tables on rank {}: their rows take up to {} on disk once every one is "
            "written, and {} has {} free: a run that writes that many rows stops with a "
            "full-disk error (the checkpoints written before it stay)",
            pg_->rank(), format_bytes(static_cast<double>(full)), storage_dir_,
            format_bytes(static_cast<double>(free_bytes)));
    }
}

bool ShardedEmbeddingBagCollection::has_cached_shards() const {
    for (const Group* g : {entries_.get(), row_wise_.get()}) {
        for (const ShardLookup& s : g->local) {
            if (s.cached)
                return true;
        }
    }
    return false;
}

namespace {

// The ids the cached shard `s` looks up in the received `kjt` (lookup_forward's slice), as a
// view: nothing of `s` is written (prefetch_ahead runs beside s's own lookups).
Tensor shard_ids(const ShardedEmbeddingBagCollection::ShardLookup& s,
                 const KeyedJaggedTensor& kjt) {
    const int64_t B = kjt.stride();
    const int64_t* off = kjt.offsets().data<int64_t>();
    return kjt.values().slice(off[s.first_key * B], off[(s.first_key + s.num_keys) * B]);
}

}  // namespace

void ShardedEmbeddingBagCollection::prefetch(InputDist& dist, Stream& stream) {
    input_dist_wait(dist);
    for (const auto& [g, p] :
         {std::pair{entries_.get(), &dist.entries}, std::pair{row_wise_.get(), &dist.row_wise}}) {
        for (ShardLookup& s : g->local) {
            if (!s.cached || !p->received)
                continue;
            s.cached->prefetch(shard_ids(s, *p->received), s.slot_ids, stream);
            s.prefetched = true;
        }
    }
    prefetched_ = &dist;
}

void ShardedEmbeddingBagCollection::prefetch_ahead(const InputDist& dist) {
    for (const auto& [g, p] :
         {std::pair{entries_.get(), &dist.entries}, std::pair{row_wise_.get(), &dist.row_wise}}) {
        for (ShardLookup& s : g->local) {
            if (s.cached && p->received)
                s.cached->prefetch_ahead(shard_ids(s, *p->received));
        }
    }
}

}  // namespace shardrec
