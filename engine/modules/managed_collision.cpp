#include "engine/modules/managed_collision.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <utility>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "kernels/threads.h"

namespace shardrec {

namespace {

__extension__ typedef unsigned __int128 u128;

// How many ids ahead the batch loops prefetch their hash-table cells.
constexpr size_t kPrefetchAhead = 16;

// f(lo, hi) over [0, count) in contiguous chunks, one a CPU thread (one chunk for small counts).
template <class F>
void for_chunks(size_t count, F&& f) {
    const int64_t chunks = count >= kManagedCollisionParallelIds ? kernels::cpu_threads() : 1;
    kernels::parallel_tasks(chunks, [&](int64_t c) {
        const auto k = static_cast<size_t>(c), m = static_cast<size_t>(chunks);
        f(count * k / m, count * (k + 1) / m);
    });
}

// Sorts v[0, end) by `less`, a total order (so the result is the one std::sort gives): chunks
// sorted on the CPU threads at once, then merged in pairs.
template <class T, class Less>
void parallel_sort(std::vector<T>& v, size_t end, Less less) {
    constexpr size_t kMinChunk = 1 << 16;
    size_t chunks =
        std::max<size_t>(1, std::min(static_cast<size_t>(kernels::cpu_threads()), end / kMinChunk));
    std::vector<size_t> at(chunks + 1);
    for (size_t k = 0; k <= chunks; ++k) {
        at[k] = end * k / chunks;
    }
    const auto it = [&](size_t i) { return v.begin() + static_cast<std::ptrdiff_t>(i); };
    kernels::parallel_tasks(static_cast<int64_t>(chunks), [&](int64_t k) {
        std::sort(it(at[static_cast<size_t>(k)]), it(at[static_cast<size_t>(k) + 1]), less);
    });
    while (chunks > 1) {
        const size_t pairs = chunks / 2;
        kernels::parallel_tasks(static_cast<int64_t>(pairs), [&](int64_t p) {
            const auto k = 2 * static_cast<size_t>(p);
            std::inplace_merge(it(at[k]), it(at[k + 1]), it(at[k + 2]), less);
        });
        std::vector<size_t> merged;
        for (size_t k = 0; k <= chunks; k += 2) {
            merged.push_back(at[k]);
        }
        if (merged.back() != end) {
            merged.push_back(end);
        }
        at.swap(merged);
        chunks = at.size() - 1;
    }
}

using Scored = ManagedCollisionScored;

// What an eviction pass ranks by: the policy, its decay exponent and the pass's step.
struct ScoreRule {
    EvictionPolicy policy;
    double decay;
    int64_t step;

    // distance_lfu with an exponent other than 1 has no exact integer form: its score is the key.
    bool exact() const { return policy != EvictionPolicy::kDistanceLfu || decay == 1.0; }
};

// Sign of a's eviction score minus b's (higher scores are kept). TorchRec: lfu count; lru
// -(step - last + 1)^decay, ordered as last for any decay > 0; distance_lfu
// count / (step - last + 1)^decay, with decay 1 compared exactly by cross-multiplication instead
// of in floating point. Called on equal keys only, so an inexact rule's scores are equal.
int compare_exact(const ScoreRule& rule, const Scored& a, const Scored& b) {
    switch (rule.policy) {
        case EvictionPolicy::kLfu:
            return a.count > b.count ? 1 : a.count < b.count ? -1 : 0;
        case EvictionPolicy::kLru:
            return a.last > b.last ? 1 : a.last < b.last ? -1 : 0;
        case EvictionPolicy::kDistanceLfu: {
            if (!rule.exact()) {
                return 0;
            }
            const u128 da = static_cast<u128>(rule.step - a.last + 1);
            const u128 db = static_cast<u128>(rule.step - b.last + 1);
            const u128 x = static_cast<u128>(a.count) * db, y = static_cast<u128>(b.count) * da;
            return x > y ? 1 : x < y ? -1 : 0;
        }
    }
    return 0;
}

// The key of compare_scores' fast path. Rounding is monotone, so for exact operands (< 2^53)
// key(a) > key(b) implies score(a) > score(b); equal keys (or NaN) fall back to the exact test.
// distance_lfu with decay != 1 is the score itself, count / pow(distance, decay) in double
// (TorchRec rounds it to float32): the same bits on every rank, whatever the world size.
double score_key(const ScoreRule& rule, int64_t count, int64_t last) {
    const int64_t distance = rule.step - last + 1;
    if (!rule.exact()) {
        return static_cast<double>(count) / std::pow(static_cast<double>(distance), rule.decay);
    }
    constexpr int64_t kExact = int64_t{1} << 53;
    const int64_t v = rule.policy == EvictionPolicy::kLru ? last : count;
    const int64_t d = rule.policy == EvictionPolicy::kDistanceLfu ? distance : 1;
    if (v < -kExact || v > kExact || d < 1 || d > kExact) {
        return __builtin_nan("");
    }
    return static_cast<double>(v) / static_cast<double>(d);
}

Scored scored(const ScoreRule& rule, int64_t count, int64_t last, uint64_t id, int64_t slot) {
    return {count, last, id, slot, score_key(rule, count, last)};
}

int compare_scores(const ScoreRule& rule, const Scored& a, const Scored& b) {
    if (a.key > b.key) {
        return 1;
    }
    if (a.key < b.key) {
        return -1;
    }
    return compare_exact(rule, a, b);
}

bool scores_above(const ScoreRule& rule, const Scored& a, const Scored& b) {
    return compare_scores(rule, a, b) > 0;
}

// (1 - p)^count by binary powering: IEEE products only, so the same bits on every machine.
double keep_out_probability(double p, int64_t count) {
    double base = 1.0 - p;
    double result = 1.0;
    for (uint64_t e = static_cast<uint64_t>(count); e != 0; e >>= 1) {
        if (e & 1) {
            result *= base;
        }
        base *= base;
    }
    return result;
}

}  // namespace

bool parse_eviction_policy(const std::string& name, EvictionPolicy* out) {
    if (name == "lfu") {
        *out = EvictionPolicy::kLfu;
    } else if (name == "lru") {
        *out = EvictionPolicy::kLru;
    } else if (name == "distance_lfu") {
        *out = EvictionPolicy::kDistanceLfu;
    } else {
        return false;
    }
    return true;
}

const char* eviction_policy_name(EvictionPolicy policy) {
    switch (policy) {
        case EvictionPolicy::kLfu:
            return "lfu";
        case EvictionPolicy::kLru:
            return "lru";
        case EvictionPolicy::kDistanceLfu:
            return "distance_lfu";
    }
    return "?";
}

std::string parse_threshold_filter(const std::string& text, ThresholdFilter* out) {
    const size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    const bool has_arg = colon != std::string::npos;
    const std::string arg = has_arg ? text.substr(colon + 1) : "";
    ThresholdFilter f;
    if (kind == "none" || kind == "average") {
        if (has_arg) {
            return "'" + kind + "' takes no argument";
        }
        f.kind = kind == "none" ? ThresholdKind::kNone : ThresholdKind::kAverage;
    } else if (kind == "dynamic") {
        f.kind = ThresholdKind::kDynamic;
        if (has_arg) {
            char* end = nullptr;
            const long long m = std::strtoll(arg.c_str(), &end, 10);
            if (arg.empty() || *end != '\0' || m < 1) {
                return "dynamic:N needs an integer multiplier N >= 1, not '" + arg + "'";
            }
            f.multiplier = m;
        }
    } else if (kind == "probabilistic") {
        f.kind = ThresholdKind::kProbabilistic;
        if (has_arg) {
            char* end = nullptr;
            const double p = std::strtod(arg.c_str(), &end);
            if (arg.empty() || *end != '\0' || !(p > 0.0 && p <= 1.0)) {
                return "probabilistic:p needs a probability 0 < p <= 1, not '" + arg + "'";
            }
            f.probability = p;
        }
    } else {
        return "unknown threshold '" + text + "' (none, average, dynamic[:N], probabilistic[:p])";
    }
    *out = f;
    return "";
}

std::string threshold_filter_name(const ThresholdFilter& filter) {
    switch (filter.kind) {
        case ThresholdKind::kNone:
            return "none";
        case ThresholdKind::kAverage:
            return "average";
        case ThresholdKind::kDynamic:
            return "dynamic:" + std::to_string(filter.multiplier);
        case ThresholdKind::kProbabilistic:
            return fmt::format("probabilistic:{}", filter.probability);
    }
    return "?";
}

MCHManagedCollisionModule::MCHManagedCollisionModule(std::string name,
                                                     const ManagedCollisionOptions& options)
    : name_(std::move(name)), options_(options) {
    const ManagedCollisionOptions& o = options_;
    SR_CHECK(o.mch_size >= 0, "table {}: managed_collision.mch_size must be >= 0, not {}", name_,
             o.mch_size);
    // TorchRec keeps the last zch slot out of every eviction and sends unmapped ids to it; we do
    // so only without a residual range, where it is the fallback row.
    const int64_t min_zch = o.mch_size == 0 ? 2 : 1;
    SR_CHECK(o.zch_size >= min_zch,
             "table {}: managed_collision.zch_size must be >= {} (with mch_size {}), not {}", name_,
             min_zch, o.mch_size, o.zch_size);
    SR_CHECK(o.eviction_interval >= 1,
             "table {}: managed_collision.eviction_interval must be >= 1, not {}", name_,
             o.eviction_interval);
    SR_CHECK(o.decay_exponent > 0.0 && std::isfinite(o.decay_exponent),
             "table {}: managed_collision.decay_exponent must be a finite number > 0, not {}",
             name_, o.decay_exponent);
    SR_CHECK(o.input_hash_size >= 1 && o.input_hash_size <= (uint64_t{1} << 63),
             "table {}: managed_collision.input_hash_size must be in [1, 2^63], not {}", name_,
             o.input_hash_size);
    SR_CHECK(o.output_global_offset >= 0,
             "table {}: managed_collision output_global_offset must be >= 0", name_);
    usable_ = o.mch_size == 0 ? o.zch_size - 1 : o.zch_size;
}

int64_t MCHManagedCollisionModule::slot_bytes(int64_t zch_size) {
    const auto n = static_cast<size_t>(std::max<int64_t>(zch_size, 0));
    // kParts tables of about n / kParts ids each (a part's count is binomial: 4 standard
    // deviations more cover the largest part).
    const size_t mean = n / kParts;
    const auto part = mean + static_cast<size_t>(4.0 * std::sqrt(static_cast<double>(mean)));
    return static_cast<int64_t>(kParts * IdTable<Slot>::capacity_for(part) *
                                    sizeof(IdTable<Slot>::Cell) +
                                n * sizeof(uint64_t));
}

int64_t MCHManagedCollisionModule::unmapped_row(uint64_t id) const {
    const ManagedCollisionOptions& o = options_;
    if (o.mch_size == 0) {
        return o.output_global_offset + o.zch_size - 1;
    }
    // mch_hash_func: a fixed 64-bit mix, then modulo the residual range.
    const uint64_t h = rng::mix64(id) % static_cast<uint64_t>(o.mch_size);
    return o.output_global_offset + o.zch_size + static_cast<int64_t>(h);
}

IdTable<MCHManagedCollisionModule::Slot>& MCHManagedCollisionModule::slots_of(uint64_t id) {
    return slots_[static_cast<size_t>(managed_collision_part(id, kParts))];
}

const IdTable<MCHManagedCollisionModule::Slot>& MCHManagedCollisionModule::slots_of(
    uint64_t id) const {
    return slots_[static_cast<size_t>(managed_collision_part(id, kParts))];
}

int64_t MCHManagedCollisionModule::slot_of(int64_t raw_id) const {
    const uint64_t id = managed_collision_input_hash(raw_id, options_.input_hash_size);
    const Slot* s = slots_of(id).find(id);
    return s == nullptr ? -1 : s->slot;
}

int64_t MCHManagedCollisionModule::forward(const int64_t* ids, int64_t n, int64_t* out) {
    bins_.bin({ManagedCollisionRange{ids, n, 0}}, options_.input_hash_size, 1);
    return forward(bins_.bucket(0), out);
}

int64_t MCHManagedCollisionModule::forward(const ManagedCollisionIds& ids, int64_t* out) {
    const int64_t hits = profile(ids, out);
    // Between passes a slot keeps its id, so the rows profile wrote stand unless new ids took free
    // slots (an id without a slot may have one now) or a pass ran (any may have moved).
    if (!fresh_.empty() || step_ % options_.eviction_interval == 0) {
        return remap(ids, out);
    }
    return hits;
}

int64_t MCHManagedCollisionModule::profile(const ManagedCollisionIds& ids, int64_t* out) {
    ++step_;
    window_total_ += static_cast<int64_t>(ids.size());
    // First the slots (one random cache line an id, fetched a few ids ahead): a mapped id's uses
    // go to its slot (with a threshold filter, to the window); then the ids without a slot, into
    // the window. On the CPU threads, thread t
    // taking the ids of parts t, t + T, ... (T: the chunks the ids were binned in), so a part's
    // slots and window are written by one thread only and the counts do not depend on the thread
    // count.
    const int64_t threads = ids.chunks;
    const auto T = static_cast<size_t>(threads), P = static_cast<size_t>(kParts);
    const ManagedCollisionIds::Id* binned = ids.ids.data();
    const size_t* bin_at = ids.bin_at.data();
    std::atomic<int64_t> hits{0};
    const bool filtered = options_.threshold.kind != ThresholdKind::kNone;
    const int64_t last_pass = (step_ - 1) / options_.eviction_interval * options_.eviction_interval;
    kernels::parallel_tasks(threads, [&](int64_t thread) {
        const auto t = static_cast<size_t>(thread);
        int64_t found = 0;
        const auto visit = [&](size_t p, const ManagedCollisionIds::Id& b) {
            const size_t i = b.at;
            const uint64_t id = b.id;
            Slot* s = slots_[p].find(id);
            if (s == nullptr) {
                out[i] = unmapped_row(id);
                unmapped_parts_[p].push_back(id);
                return;
            }
            ++found;
            out[i] = options_.output_global_offset + s->slot;
            // With a threshold filter the pass keeps the interval's uses only if the filter
            // admits them: the first use in the interval notes what to go back to.
            if (filtered && s->last <= last_pass) {
                used_[p].push_back({id, s->count, s->last});
            }
            ++s->count;
            s->last = step_;
        };
        // The thread's ids chunk by chunk from its own chunk on (so the threads seldom write the
        // same lines of out at once), each visited kPrefetchAhead ids after its cell was
        // prefetched.
        size_t ring[kPrefetchAhead];  // places in binned, and their parts
        uint8_t ring_part[kPrefetchAhead];
        size_t seen = 0;
        for (size_t p = t; p < P; p += T) {
            unmapped_parts_[p].clear();
        }
        for (size_t k = 0; k < T; ++k) {
            for (size_t p = t; p < P; p += T) {
                const size_t bin = ((t + k) % T) * P + p;
                for (size_t j = bin_at[bin]; j < bin_at[bin + 1]; ++j) {
                    slots_[p].prefetch(binned[j].id);
                    const size_t at = seen % kPrefetchAhead;
                    if (seen >= kPrefetchAhead) {
                        visit(ring_part[at], binned[ring[at]]);
                    }
                    ring[at] = j;
                    ring_part[at] = static_cast<uint8_t>(p);
                    ++seen;
                }
            }
        }
        for (size_t j = seen > kPrefetchAhead ? seen - kPrefetchAhead : 0; j < seen; ++j) {
            visit(ring_part[j % kPrefetchAhead], binned[ring[j % kPrefetchAhead]]);
        }
        hits += found;
        // The window grown before the loop, not inside it, so the prefetched cells stay put.
        for (size_t p = t; p < P; p += T) {
            const std::vector<uint64_t>& unmapped = unmapped_parts_[p];
            IdTable<Seen>& window = window_[p];
            window.reserve(window.size() + unmapped.size());
            for (size_t i = 0; i < unmapped.size(); ++i) {
                if (i + kPrefetchAhead < unmapped.size()) {
                    window.prefetch(unmapped[i + kPrefetchAhead]);
                }
                Seen& w = window.get_or_insert(unmapped[i]);
                ++w.count;
                w.last = step_;
            }
        }
    });
    // Unmapped ids matter only while free slots are left (they take them below).
    fresh_.clear();
    if (occupancy() < usable_) {
        for (const std::vector<uint64_t>& part : unmapped_parts_) {
            fresh_.insert(fresh_.end(), part.begin(), part.end());
        }
    }
    // New ids take the free slots at once, in ascending id order so the slots do not depend on
    // the order of ids within the batch. TorchRec admits them only at the next eviction pass
    // (free slots score lowest, so they fill then); admitting now gives a table with zch_size >=
    // distinct ids its one row per id from the first step.
    std::sort(fresh_.begin(), fresh_.end());
    for (size_t i = 0; i < fresh_.size() && occupancy() < usable_;) {
        size_t j = i;
        while (j < fresh_.size() && fresh_[j] == fresh_[i]) {
            ++j;
        }
        // With a filter: all its uses of the interval, which the pass keeps only if the filter
        // admits them (if not, the slot scores lowest at a later pass).
        const uint64_t id = fresh_[i];
        const auto part = static_cast<size_t>(managed_collision_part(id, kParts));
        const int64_t count =
            filtered ? window_[part].find(id)->count : static_cast<int64_t>(j - i);
        slots_[part].get_or_insert(id) = Slot{occupancy(), count, step_};
        if (filtered) {
            used_[part].push_back({id, 0, 0});
        }
        slot_ids_.push_back(fresh_[i]);
        window_may_hold_slots_ = true;
        ++admissions_total_;
        i = j;
    }
    if (step_ % options_.eviction_interval == 0) {
        eviction_pass();
        for (IdTable<Seen>& window : window_) {
            window.clear();
        }
        window_total_ = 0;
        window_may_hold_slots_ = false;
    }
    return hits;
}

bool MCHManagedCollisionModule::admitted(uint64_t id,
                                         int64_t count,
                                         uint64_t num_ids,
                                         uint64_t total) const {
    const ThresholdFilter& f = options_.threshold;
    const u128 c = static_cast<u128>(count);
    switch (f.kind) {
        case ThresholdKind::kNone:
            return true;
        case ThresholdKind::kAverage:  // count > total / num_ids
            return c * num_ids > static_cast<u128>(total);
        case ThresholdKind::kDynamic:  // count > total / num_ids * multiplier
            return c * num_ids > static_cast<u128>(total) * static_cast<uint64_t>(f.multiplier);
        case ThresholdKind::kProbabilistic: {
            // TorchRec draws torch.rand; we draw from (seed, id, step) so any rank agrees.
            const double r = rng::uniform(options_.seed, id, static_cast<uint64_t>(step_));
            return 1.0 - keep_out_probability(f.probability, count) > r;
        }
    }
    return false;
}

// With a threshold filter, at a pass: the slots used in the interval (used_) keep their uses of
// it only if the filter admits them, else they go back to their count and last before it.
// Returns the interval's distinct ids, the average and dynamic filters' statistic: those still
// without a slot (an id that took a free slot in the interval is in the window and in used_) and
// the slots used. On the CPU threads by part (an id is in one part, so no two threads write the
// same entry).
uint64_t MCHManagedCollisionModule::judge_used(uint64_t total) {
    const auto P = static_cast<int64_t>(kParts);
    const bool check = window_may_hold_slots_;
    std::array<uint64_t, kParts> distinct{};
    kernels::parallel_tasks(P, [&](int64_t p) {
        const IdTable<Slot>& slots = slots_[static_cast<size_t>(p)];
        uint64_t n = used_[static_cast<size_t>(p)].size();
        window_[static_cast<size_t>(p)].for_each(
            [&](uint64_t id, const Seen&) { n += !check || slots.find(id) == nullptr ? 1 : 0; });
        distinct[static_cast<size_t>(p)] = n;
    });
    uint64_t num_ids = 0;
    for (const uint64_t n : distinct) {
        num_ids += n;
    }
    kernels::parallel_tasks(P, [&](int64_t p) {
        IdTable<Slot>& slots = slots_[static_cast<size_t>(p)];
        std::vector<Used>& used = used_[static_cast<size_t>(p)];
        for (size_t i = 0; i < used.size(); ++i) {
            if (i + kPrefetchAhead < used.size()) {
                slots.prefetch(used[i + kPrefetchAhead].id);
            }
            const Used& u = used[i];
            Slot* s = slots.find(u.id);
            if (!admitted(u.id, s->count - u.count, num_ids, total)) {
                s->count = u.count;
                s->last = u.last;
            }
        }
        used.clear();
    });
    return num_ids;
}

// TorchRec's _coalesce_history + update_metadata_and_generate_eviction_scores: the incumbent
// slots and the admitted new ids of the window are ranked together by score (ties: incumbents
// first, by id ascending; then new ids by count descending, id ascending, TorchRec's stable
// argsort order); the usable_ best keep or get a slot.
//
// Only the m worst incumbents can go (m <= the candidates), so only that many are selected
// (nth_element) and sorted; the orders are total (ids are unique), so that prefix is the fully
// sorted list's.
void MCHManagedCollisionModule::eviction_pass() {
    const auto total = static_cast<uint64_t>(window_total_);
    // The window holds the ids without a slot (and may hold ids that took a free slot since:
    // looked up only when some may have, never once the slots are full). With a threshold filter
    // the filter first judges the slots used in the interval too (judge_used), as TorchRec
    // filters its coalesced history, mapped ids included, before it updates the incumbents'
    // metadata; its statistics cover every id of the interval.
    const bool filtered = options_.threshold.kind != ThresholdKind::kNone;
    const bool check = window_may_hold_slots_;
    const auto unmapped = [&](uint64_t id) { return !check || slots_of(id).find(id) == nullptr; };
    // The window's and the slots' parts are walked on the CPU threads at once, each part's
    // results joined in part order.
    const auto P = static_cast<int64_t>(kParts);
    const ScoreRule rule{options_.eviction_policy, options_.decay_exponent, step_};
    uint64_t num_ids = 0;
    if (filtered) {
        num_ids = judge_used(total);
    }
    kernels::parallel_tasks(P, [&](int64_t p) {
        std::vector<Scored>& out = listed_[static_cast<size_t>(p)];
        out.clear();
        window_[static_cast<size_t>(p)].for_each([&](uint64_t id, const Seen& seen) {
            if (unmapped(id) && admitted(id, seen.count, num_ids, total)) {
                out.push_back(scored(rule, seen.count, seen.last, id, -1));
            }
        });
    });
    std::vector<Scored>& candidates = candidates_;
    candidates.clear();
    for (const std::vector<Scored>& part : listed_) {
        candidates.insert(candidates.end(), part.begin(), part.end());
    }
    if (candidates.empty()) {
        return;
    }
    // Best first, in the merged order's tie rule.
    parallel_sort(candidates, candidates.size(), [&](const Scored& a, const Scored& b) {
        const int c = compare_scores(rule, a, b);
        if (c != 0) {
            return c > 0;
        }
        return a.count != b.count ? a.count > b.count : a.id < b.id;
    });
    // Worst first: by score ascending, ties by id descending (the last in the merged order drops
    // first). At most one incumbent per candidate can go, so only that many worst are ordered.
    // Only incumbents with a key <= a threshold are listed: a key quantile of a sample of the
    // slots, chosen so that about 1/8 more than the candidates (and 64 samples) fall below it.
    // Any incumbent left out has a key above every listed one, hence a strictly better score than
    // each of them; so when at least as many incumbents as candidates are listed (and no key is
    // NaN), the worst ones are all among them. Otherwise every incumbent is listed.
    const size_t want = std::min(candidates.size(), slot_ids_.size());
    double threshold = std::numeric_limits<double>::infinity();
    constexpr size_t kSample = 4096;
    const size_t share = want * kSample / std::max<size_t>(slot_ids_.size(), 1);
    const size_t q = share + share / 8 + 64;
    if (slot_ids_.size() >= 4 * kSample && q < kSample) {
        std::vector<double> sample;
        for (size_t i = 0; i < kSample; ++i) {
            const size_t slot = i * slot_ids_.size() / kSample;
            const Slot* s = slots_of(slot_ids_[slot]).find(slot_ids_[slot]);
            sample.push_back(score_key(rule, s->count, s->last));
        }
        std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(q),
                         sample.end());
        if (!std::isnan(sample[q])) {
            threshold = sample[q];
        }
    }
    std::vector<Scored>& worst = worst_;
    const auto worse = [&](const Scored& a, const Scored& b) {
        const int c = compare_scores(rule, a, b);
        return c != 0 ? c < 0 : a.id > b.id;
    };
    // The parts listed on the CPU threads, the lists joined in part order. A part keeps only its
    // `want` worst (the worst `want` overall are among them), in a heap whose top is the best
    // kept: many incumbents can share the threshold's key (a threshold filter leaves the slots
    // whose uses it rejected at a count of 0), and listing them all took most of a pass.
    std::array<char, kParts> nan_in{};
    std::array<size_t, kParts> listed_in{};
    const auto list_incumbents = [&](double below) {
        kernels::parallel_tasks(P, [&](int64_t p) {
            std::vector<Scored>& out = listed_[static_cast<size_t>(p)];
            out.clear();
            bool nan = false;
            size_t listed = 0;
            slots_[static_cast<size_t>(p)].for_each([&](uint64_t id, const Slot& s) {
                const double key = score_key(rule, s.count, s.last);
                if (key > below) {
                    return;
                }
                nan = nan || std::isnan(key);
                ++listed;
                const Scored e{s.count, s.last, id, s.slot, key};
                if (out.size() < want) {  // a heap once full
                    out.push_back(e);
                    if (out.size() == want) {
                        std::make_heap(out.begin(), out.end(), worse);
                    }
                } else if (want > 0 && worse(e, out.front())) {
                    std::pop_heap(out.begin(), out.end(), worse);
                    out.back() = e;
                    std::push_heap(out.begin(), out.end(), worse);
                }
            });
            nan_in[static_cast<size_t>(p)] = nan ? 1 : 0;
            listed_in[static_cast<size_t>(p)] = listed;
        });
        worst.clear();
        size_t listed = 0;
        for (size_t p = 0; p < static_cast<size_t>(kParts); ++p) {
            worst.insert(worst.end(), listed_[p].begin(), listed_[p].end());
            listed += listed_in[p];
        }
        const bool nan = std::find(nan_in.begin(), nan_in.end(), 1) != nan_in.end();
        return !nan && listed >= want;
    };
    if (!list_incumbents(threshold) && !std::isinf(threshold)) {
        list_incumbents(std::numeric_limits<double>::infinity());
    }
    const size_t k = std::min(candidates.size(), worst.size());
    std::nth_element(worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(k), worst.end(),
                     worse);
    parallel_sort(worst, k, worse);
    // Free slots (none after the first fill, but kept general) go first, lowest first; then
    // candidate m enters the best usable_ iff it ranks above the m-th worst incumbent.
    const int64_t occupied = occupancy();
    const size_t free_slots = static_cast<size_t>(usable_ - occupied);
    std::vector<int64_t> out;
    size_t m = 0;
    for (; m < candidates.size(); ++m) {
        if (m < free_slots) {
            out.push_back(occupied + static_cast<int64_t>(m));
        } else if (m - free_slots < k && scores_above(rule, candidates[m], worst[m - free_slots])) {
            out.push_back(worst[m - free_slots].slot);
        } else {
            break;
        }
    }
    // Lowest admitted id to the lowest freed slot, whatever the scores: order-free and simple.
    const std::vector<Scored>& in = candidates;
    parallel_sort(candidates, m, [](const Scored& a, const Scored& b) { return a.id < b.id; });
    // The slots in ascending order: distinct and in [0, usable_), so a bitmap of them sorts them.
    std::vector<uint64_t>& bits = slot_bits_;
    bits.assign(static_cast<size_t>(usable_ + 63) / 64, 0);
    for (const int64_t slot : out) {
        bits[static_cast<size_t>(slot) / 64] |= uint64_t{1} << (slot % 64);
    }
    size_t next = 0;
    for (size_t w = 0; w < bits.size(); ++w) {
        for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
            out[next++] = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b)));
        }
    }
    // The slots change owners here; the parts' tables then change on the CPU threads at once,
    // each its evicted ids out, then its admitted ids in (in this order, so the same cells).
    for (size_t p = 0; p < static_cast<size_t>(kParts); ++p) {
        gone_[p].clear();
        taking_[p].clear();
    }
    for (size_t i = 0; i < m; ++i) {
        const int64_t slot = out[i];
        if (slot >= occupied) {  // free slots are taken from the lowest, so they stay a suffix
            slot_ids_.push_back(0);
        } else {
            const uint64_t gone = slot_ids_[static_cast<size_t>(slot)];
            gone_[static_cast<size_t>(managed_collision_part(gone, kParts))].push_back(gone);
            pending_evictions_.push_back(options_.output_global_offset + slot);
            ++evictions_total_;
        }
        slot_ids_[static_cast<size_t>(slot)] = in[i].id;
        taking_[static_cast<size_t>(managed_collision_part(in[i].id, kParts))].push_back(i);
        ++admissions_total_;
    }
    kernels::parallel_tasks(P, [&](int64_t part) {
        IdTable<Slot>& slots = slots_[static_cast<size_t>(part)];
        const std::vector<uint64_t>& gone = gone_[static_cast<size_t>(part)];
        for (size_t j = 0; j < gone.size(); ++j) {
            if (j + kPrefetchAhead < gone.size()) {
                slots.prefetch(gone[j + kPrefetchAhead]);
            }
            slots.erase(gone[j]);
        }
        const std::vector<size_t>& taking = taking_[static_cast<size_t>(part)];
        slots.reserve(slots.size() + taking.size());
        for (size_t j = 0; j < taking.size(); ++j) {
            if (j + kPrefetchAhead < taking.size()) {
                slots.prefetch(in[taking[j + kPrefetchAhead]].id);
            }
            const Scored& c = in[taking[j]];
            slots.get_or_insert(c.id) = Slot{out[taking[j]], c.count, c.last};
        }
    });
}

int64_t MCHManagedCollisionModule::remap(const int64_t* ids, int64_t n, int64_t* out) const {
    ManagedCollisionBins bins;
    bins.bin({ManagedCollisionRange{ids, n, 0}}, options_.input_hash_size, 1);
    return remap(bins.bucket(0), out);
}

int64_t MCHManagedCollisionModule::remap(const ManagedCollisionIds& ids, int64_t* out) const {
    std::atomic<int64_t> hits{0};
    const ManagedCollisionIds::Id* binned = ids.ids.data();
    for_chunks(ids.size(), [&](size_t lo, size_t hi) {
        int64_t found = 0;
        for (size_t i = lo; i < hi; ++i) {
            if (i + kPrefetchAhead < hi) {
                slots_of(binned[i + kPrefetchAhead].id).prefetch(binned[i + kPrefetchAhead].id);
            }
            const uint64_t id = binned[i].id;
            const Slot* s = slots_of(id).find(id);
            out[binned[i].at] =
                s != nullptr ? options_.output_global_offset + s->slot : unmapped_row(id);
            found += s != nullptr;
        }
        hits += found;
    });
    return hits;
}

std::vector<int64_t> MCHManagedCollisionModule::evict() {
    std::vector<int64_t> rows;
    rows.swap(pending_evictions_);
    if (!std::is_sorted(rows.begin(), rows.end())) {  // one pass's are sorted already
        std::sort(rows.begin(), rows.end());
    }
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

}  // namespace shardrec
