#include "test/reference/managed_collision.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace shardrec::ref {

namespace {

__extension__ typedef unsigned __int128 u128;

struct Entry {
    int64_t count;
    int64_t last;
    bool incumbent;
    int64_t slot;  // incumbent
    uint64_t id;   // new id
};

}  // namespace

ManagedCollisionRef::ManagedCollisionRef(McOptions options) : o_(std::move(options)) {
    usable_ = o_.mch_size == 0 ? o_.zch_size - 1 : o_.zch_size;
    for (int64_t s = 0; s < usable_; ++s) {
        free_.insert(s);
    }
}

std::vector<int64_t> ManagedCollisionRef::forward(const std::vector<int64_t>& raw) {
    step_ += 1;
    std::set<uint64_t> fresh;
    std::map<uint64_t, int64_t> batch_count;
    for (int64_t r : raw) {
        const uint64_t id = static_cast<uint64_t>(r) % o_.input_hash_size;
        window_[id].count += 1;
        window_[id].last = step_;
        batch_count[id] += 1;
    }
    // With a threshold filter a mapped id's uses count at the pass, if the filter admits them.
    const bool filtered = o_.threshold != McThreshold::kNone;
    const std::map<uint64_t, int64_t> slots = id_to_slot();
    for (const auto& [id, c] : batch_count) {
        const auto it = slots.find(id);
        if (it == slots.end()) {
            fresh.insert(id);
        } else if (!filtered) {
            slot_meta_[it->second].count += c;
            slot_meta_[it->second].last = step_;
        }
    }
    for (uint64_t id : fresh) {
        if (free_.empty()) {
            break;
        }
        const int64_t slot = *free_.begin();
        free_.erase(free_.begin());
        slot_to_id_[slot] = id;
        slot_meta_[slot] = filtered ? Meta{0, 0} : Meta{batch_count[id], step_};
    }
    if (step_ % o_.eviction_interval == 0) {
        eviction_pass();
        window_.clear();
    }
    return remap(raw);
}

void ManagedCollisionRef::eviction_pass() {
    int64_t total = 0;
    for (const auto& w : window_) {
        total += w.second.count;
    }
    const int64_t num = static_cast<int64_t>(window_.size());
    // TorchRec's threshold filter over the interval's ids, mapped or not.
    const auto pass = [&](uint64_t id, const Meta& m) {
        if (o_.threshold == McThreshold::kAverage) {
            return m.count * num > total;  // count > mean
        }
        if (o_.threshold == McThreshold::kDynamic) {
            return m.count * num > total * o_.multiplier;
        }
        if (o_.threshold == McThreshold::kProbabilistic) {
            double keep_out = 1.0;  // (1 - p)^count, by squaring as the module documents
            double base = 1.0 - o_.probability;
            int64_t e = m.count;
            while (e > 0) {
                if (e % 2 == 1) {
                    keep_out = keep_out * base;
                }
                base = base * base;
                e = e / 2;
            }
            return 1.0 - keep_out > o_.draw(id, step_);
        }
        return true;
    };
    std::vector<Entry> incumbents;
    // TorchRec's buffer order: occupied slots by raw id ascending, empty slots last.
    std::map<uint64_t, int64_t> by_id;
    for (const auto& [slot, id] : slot_to_id_) {
        by_id[id] = slot;
    }
    // With a filter, the interval's uses of a mapped id update its slot only if it passes.
    if (o_.threshold != McThreshold::kNone) {
        for (const auto& [id, m] : window_) {
            if (by_id.count(id) && pass(id, m)) {
                slot_meta_[by_id[id]].count += m.count;
                slot_meta_[by_id[id]].last = m.last;
            }
        }
    }
    for (const auto& [id, slot] : by_id) {
        incumbents.push_back({slot_meta_[slot].count, slot_meta_[slot].last, true, slot, id});
    }
    for (int64_t slot : free_) {
        incumbents.push_back({0, 0, true, slot, 0});
    }
    std::vector<Entry> fresh;
    for (const auto& [id, m] : window_) {
        if (!by_id.count(id) && pass(id, m)) {
            fresh.push_back({m.count, m.last, false, -1, id});
        }
    }
    // New ids by count descending, stable over ids ascending (torch.unique then argsort).
    std::stable_sort(fresh.begin(), fresh.end(),
                     [](const Entry& a, const Entry& b) { return a.count > b.count; });
    std::vector<Entry> merged = incumbents;
    merged.insert(merged.end(), fresh.begin(), fresh.end());
    const int64_t step = step_;
    auto free_slot = [&](const Entry& e) { return e.incumbent && !slot_to_id_.count(e.slot); };
    auto above = [&](const Entry& a, const Entry& b) {
        if (free_slot(a) || free_slot(b)) {
            return !free_slot(a) && free_slot(b);
        }
        if (o_.policy == McPolicy::kLfu) {
            return a.count > b.count;
        }
        if (o_.policy == McPolicy::kLru) {
            return a.last > b.last;
        }
        if (o_.decay != 1.0) {
            const auto score = [&](const Entry& e) {
                return static_cast<double>(e.count) /
                       std::pow(static_cast<double>(step - e.last + 1), o_.decay);
            };
            return score(a) > score(b);
        }
        const u128 lhs = static_cast<u128>(a.count) * static_cast<u128>(step - b.last + 1);
        const u128 rhs = static_cast<u128>(b.count) * static_cast<u128>(step - a.last + 1);
        return lhs > rhs;
    };
    std::stable_sort(merged.begin(), merged.end(), above);
    std::vector<uint64_t> admitted;
    std::vector<int64_t> freed;
    for (size_t i = 0; i < merged.size(); ++i) {
        const bool kept = static_cast<int64_t>(i) < usable_;
        if (kept && !merged[i].incumbent) {
            admitted.push_back(merged[i].id);
        }
        if (!kept && merged[i].incumbent) {
            freed.push_back(merged[i].slot);
        }
    }
    // Free slots go lowest first (the module's fill order), whichever of them the sort dropped.
    std::vector<int64_t> taken;
    auto next_free = free_.begin();
    for (int64_t slot : freed) {
        taken.push_back(slot_to_id_.count(slot) ? slot : *next_free++);
    }
    freed = taken;
    std::sort(admitted.begin(), admitted.end());
    std::sort(freed.begin(), freed.end());
    for (size_t k = 0; k < admitted.size(); ++k) {
        const int64_t slot = freed[k];
        if (slot_to_id_.count(slot)) {
            evicted_.insert(o_.offset + slot);
        }
        free_.erase(slot);
        slot_to_id_[slot] = admitted[k];
        slot_meta_[slot] = Meta{window_[admitted[k]].count, window_[admitted[k]].last};
    }
}

std::vector<int64_t> ManagedCollisionRef::remap(const std::vector<int64_t>& raw) const {
    const std::map<uint64_t, int64_t> slots = id_to_slot();
    std::vector<int64_t> out;
    for (int64_t r : raw) {
        const uint64_t id = static_cast<uint64_t>(r) % o_.input_hash_size;
        const auto it = slots.find(id);
        int64_t row = it == slots.end() ? -1 : o_.offset + it->second;
        if (row < 0) {
            row = o_.mch_size == 0 ? o_.offset + o_.zch_size - 1
                                   : o_.offset + o_.zch_size + o_.residual(id);
        }
        out.push_back(row);
    }
    return out;
}

std::vector<int64_t> ManagedCollisionRef::evict() {
    std::vector<int64_t> rows(evicted_.begin(), evicted_.end());
    evicted_.clear();
    return rows;
}

std::map<uint64_t, int64_t> ManagedCollisionRef::id_to_slot() const {
    std::map<uint64_t, int64_t> m;
    for (const auto& [slot, id] : slot_to_id_) {
        m[id] = slot;
    }
    return m;
}

}  // namespace shardrec::ref
