// The managed-collision module's checkpointable state (MCHManagedCollisionModule::state and
// load_state): plain vectors in id or slot order, whatever the hash tables' order.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/modules/managed_collision.h"

namespace shardrec {

ManagedCollisionState MCHManagedCollisionModule::state() const {
    ManagedCollisionState s;
    s.step = step_;
    s.slot_ids = slot_ids_;
    s.slot_counts.resize(slot_ids_.size());
    s.slot_lasts.resize(slot_ids_.size());
    for (const IdTable<Slot>& part : slots_) {
        part.for_each([&](uint64_t, const Slot& slot) {
            s.slot_counts[static_cast<size_t>(slot.slot)] = slot.count;
            s.slot_lasts[static_cast<size_t>(slot.slot)] = slot.last;
        });
    }
    // With a threshold filter: a slot used since the pass holds its count and last from before
    // the interval, and the interval's uses are a window entry (for an id that took a free slot
    // in the interval, all of them: its window entry counts the first ones again).
    std::vector<std::pair<uint64_t, Seen>> window;
    std::vector<uint64_t> used_ids;
    for (const std::vector<Used>& part : used_) {
        for (const Used& u : part) {
            const Slot* slot = slots_of(u.id).find(u.id);
            s.slot_counts[static_cast<size_t>(slot->slot)] = u.count;
            s.slot_lasts[static_cast<size_t>(slot->slot)] = u.last;
            window.emplace_back(u.id, Seen{slot->count - u.count, slot->last});
            used_ids.push_back(u.id);
        }
    }
    std::sort(used_ids.begin(), used_ids.end());
    for_each_window([&](uint64_t id, const Seen& seen) {
        if (!std::binary_search(used_ids.begin(), used_ids.end(), id)) {
            window.emplace_back(id, seen);
        }
    });
    std::sort(window.begin(), window.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& w : window) {
        s.window_ids.push_back(w.first);
        s.window_counts.push_back(w.second.count);
        s.window_lasts.push_back(w.second.last);
    }
    s.window_total = window_total_;
    s.pending_evictions = pending_evictions_;
    s.evictions_total = evictions_total_;
    s.admissions_total = admissions_total_;
    return s;
}

void MCHManagedCollisionModule::load_state(const ManagedCollisionState& s) {
    const size_t n = s.slot_ids.size();
    SR_CHECK(
        static_cast<int64_t>(n) <= usable_ && s.slot_counts.size() == n && s.slot_lasts.size() == n,
        "table {}: the managed-collision state holds {} slots, the table {} usable ones", name_, n,
        usable_);
    SR_CHECK(s.window_counts.size() == s.window_ids.size() &&
                 s.window_lasts.size() == s.window_ids.size(),
             "table {}: the managed-collision state's window lists differ in length", name_);
    std::array<IdTable<Slot>, kParts> slots;
    for (size_t i = 0; i < n; ++i) {
        // Ids are < 2^63 after input hashing; a larger one is not a state of this module.
        SR_CHECK(s.slot_ids[i] < (uint64_t{1} << 63),
                 "table {}: the managed-collision state holds id {}, beyond 2^63", name_,
                 s.slot_ids[i]);
        bool inserted = false;
        Slot& slot =
            slots[static_cast<size_t>(managed_collision_part(s.slot_ids[i], kParts))].get_or_insert(
                s.slot_ids[i], &inserted);
        SR_CHECK(inserted, "table {}: the managed-collision state maps id {} twice", name_,
                 s.slot_ids[i]);
        slot = Slot{static_cast<int64_t>(i), s.slot_counts[i], s.slot_lasts[i]};
    }
    // With a threshold filter a mapped id's window entry is its slot's uses since the pass.
    const bool filtered = options_.threshold.kind != ThresholdKind::kNone;
    std::array<IdTable<Seen>, kParts> window;
    std::array<OwnLine<std::vector<Used>>, kParts> used;
    for (size_t i = 0; i < s.window_ids.size(); ++i) {
        const uint64_t id = s.window_ids[i];
        SR_CHECK(id < (uint64_t{1} << 63),
                 "table {}: the managed-collision state's window holds id {}, beyond 2^63", name_,
                 id);
        const auto part = static_cast<size_t>(managed_collision_part(id, kParts));
        Slot* slot = filtered ? slots[part].find(id) : nullptr;
        if (slot != nullptr) {
            used[part].push_back({id, slot->count, slot->last});
            slot->count += s.window_counts[i];
            slot->last = s.window_lasts[i];
        } else {
            window[part].get_or_insert(id) = Seen{s.window_counts[i], s.window_lasts[i]};
        }
    }
    step_ = s.step;
    slot_ids_ = s.slot_ids;
    slots_ = std::move(slots);
    window_ = std::move(window);
    used_ = std::move(used);
    window_total_ = s.window_total;
    window_may_hold_slots_ = true;
    pending_evictions_ = s.pending_evictions;
    evictions_total_ = s.evictions_total;
    admissions_total_ = s.admissions_total;
}

}  // namespace shardrec
