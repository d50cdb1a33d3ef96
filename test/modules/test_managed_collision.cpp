// MCHManagedCollisionModule against the std::map reference (test/reference/managed_collision.h)
// on id streams with a planted frequency shift, for every eviction policy and threshold filter;
// order-free slot assignment; one slot per id forever when the table is big enough; exact resume
// from state(); the option parsers.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/modules/managed_collision.h"
#include "kernels/threads.h"
#include "test/reference/managed_collision.h"

using namespace shardrec;

namespace {

// Raw 64-bit ids (some above 2^63): a skewed draw from an old vocabulary, then from a new one
// (the planted shift at step `shift`), with a few old ids still seen.
std::vector<std::vector<int64_t>> shifting_stream(
    uint64_t seed, int64_t steps, int64_t batch, int64_t vocab, int64_t shift) {
    rng::Rng r(seed);
    std::vector<std::vector<int64_t>> out;
    for (int64_t t = 0; t < steps; ++t) {
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < batch; ++i) {
            const double u = r.uniform();
            const int64_t rank = static_cast<int64_t>(static_cast<double>(vocab) * u * u * u);
            const bool fresh = t >= shift && r.uniform() < 0.8;
            ids.push_back(static_cast<int64_t>(
                rng::mix64(static_cast<uint64_t>(rank) + (fresh ? 1000000u : 0u))));
        }
        out.push_back(ids);
    }
    return out;
}

ref::McPolicy to_ref(EvictionPolicy p) {
    return p == EvictionPolicy::kLfu   ? ref::McPolicy::kLfu
           : p == EvictionPolicy::kLru ? ref::McPolicy::kLru
                                       : ref::McPolicy::kDistanceLfu;
}

ref::McOptions to_ref(const ManagedCollisionOptions& o) {
    ref::McOptions r;
    r.zch_size = o.zch_size;
    r.policy = to_ref(o.eviction_policy);
    r.decay = o.decay_exponent;
    r.eviction_interval = o.eviction_interval;
    r.threshold = static_cast<ref::McThreshold>(static_cast<int>(o.threshold.kind));
    r.multiplier = o.threshold.multiplier;
    r.probability = o.threshold.probability;
    r.input_hash_size = o.input_hash_size;
    r.mch_size = o.mch_size;
    r.offset = o.output_global_offset;
    const uint64_t seed = o.seed;
    r.draw = [seed](uint64_t id, int64_t step) {
        return rng::uniform(seed, id, static_cast<uint64_t>(step));
    };
    const int64_t mch = o.mch_size;
    r.residual = [mch](uint64_t id) {
        return static_cast<int64_t>(rng::mix64(id) % static_cast<uint64_t>(mch));
    };
    return r;
}

// The ids of a batch that own a slot: their rows are the first usable_slots of the module's.
int64_t owning(const MCHManagedCollisionModule& m, const std::vector<int64_t>& rows) {
    const int64_t first = m.options().output_global_offset;
    return std::count_if(rows.begin(), rows.end(), [&](int64_t row) {
        return row >= first && row < first + m.usable_slots();
    });
}

std::vector<int64_t> forward(MCHManagedCollisionModule& m, const std::vector<int64_t>& ids) {
    std::vector<int64_t> out(ids.size());
    const int64_t hits = m.forward(ids.data(), static_cast<int64_t>(ids.size()), out.data());
    CHECK(hits == owning(m, out));
    return out;
}

}  // namespace

TEST_CASE("managed collision matches the reference for every policy and filter", "[mc]") {
    const std::vector<EvictionPolicy> policies = {EvictionPolicy::kLfu, EvictionPolicy::kLru,
                                                  EvictionPolicy::kDistanceLfu};
    const std::vector<std::string> filters = {"none",    "average",           "dynamic:2",
                                              "dynamic", "probabilistic:0.2", "probabilistic"};
    for (EvictionPolicy policy : policies) {
        const std::vector<double> decays = policy == EvictionPolicy::kLfu
                                               ? std::vector<double>{1.0}
                                               : std::vector<double>{1.0, 0.5, 2.0};
        for (const std::string& filter : filters) {
            for (int64_t mch : {int64_t{0}, int64_t{7}}) {
                for (int64_t interval : {int64_t{1}, int64_t{3}}) {
                    for (double decay : decays) {
                        ManagedCollisionOptions o;
                        o.zch_size = 40;
                        o.eviction_policy = policy;
                        o.decay_exponent = decay;
                        o.eviction_interval = interval;
                        REQUIRE(parse_threshold_filter(filter, &o.threshold).empty());
                        o.mch_size = mch;
                        o.output_global_offset = 100;
                        o.seed = 11;
                        o.input_hash_size = (uint64_t{1} << 63) - 25;
                        INFO("policy " << eviction_policy_name(policy) << " decay " << decay
                                       << " threshold " << filter << " mch_size " << mch
                                       << " interval " << interval);
                        MCHManagedCollisionModule m("t", o);
                        ref::ManagedCollisionRef r(to_ref(o));
                        const auto stream = shifting_stream(5, 40, 30, 200, 20);
                        int64_t evicted = 0;
                        for (size_t t = 0; t < stream.size(); ++t) {
                            INFO("step " << t + 1);
                            REQUIRE(forward(m, stream[t]) == r.forward(stream[t]));
                            const std::vector<int64_t> rows = m.evict();
                            REQUIRE(rows == r.evict());
                            evicted += static_cast<int64_t>(rows.size());
                        }
                        for (const auto& [id, slot] : r.id_to_slot()) {
                            REQUIRE(m.slot_of(static_cast<int64_t>(id)) == slot);
                        }
                        REQUIRE(m.occupancy() == static_cast<int64_t>(r.id_to_slot().size()));
                        REQUIRE(m.evictions_total() == evicted);
                        if (filter == "none") {
                            REQUIRE(evicted > 0);  // the shift has something to evict
                        }
                    }
                }
            }
        }
    }
}

// TorchRec's own MCHManagedCollisionModule (torchrec 1.0.0) on the streams of
// test/fixtures/torchrec_mc/cases.txt (bench/baselines/torchrec_mc_oracle.py): every policy with
// the none, average and dynamic filters, eviction every step and every third. From the first
// eviction pass on (before it TorchRec keeps new ids out of its free slots, which shardrec gives
// them at once), the same ids of each batch find a slot of their own, the same ids hold the
// slots after each step, and each later pass evicts as many rows.
TEST_CASE("managed collision agrees with TorchRec's MCHManagedCollisionModule", "[mc][torchrec]") {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures" /
                     "torchrec_mc" / "cases.txt");
    REQUIRE(in);
    const auto read = [&](const std::string& tag) {
        std::string word;
        size_t n = 0;
        in >> word >> n;
        REQUIRE(word == tag);
        std::vector<int64_t> v(n);
        for (int64_t& x : v)
            in >> x;
        return v;
    };
    int cases = 0;
    std::string word, policy, threshold;
    int64_t interval = 0, steps = 0;
    double decay = 0;
    while (in >> word >> policy >> threshold >> interval >> steps >> decay) {
        REQUIRE(word == "case");
        INFO(policy << " (decay_exponent " << decay << "), threshold " << threshold
                    << ", eviction every " << interval << " steps");
        ManagedCollisionOptions o;
        o.zch_size = 16;
        REQUIRE(parse_eviction_policy(policy, &o.eviction_policy));
        o.decay_exponent = decay;
        REQUIRE(parse_threshold_filter(threshold, &o.threshold).empty());
        o.eviction_interval = interval;
        MCHManagedCollisionModule m("t", o);
        int64_t evictions = 0;
        for (int64_t step = 1; step <= steps; ++step) {
            INFO("step " << step);
            const std::vector<int64_t> ids = read("ids"), hit = read("hit"), map = read("map"),
                                       evicted = read("evict");
            std::vector<int64_t> rows(ids.size());
            m.forward(ids.data(), static_cast<int64_t>(ids.size()), rows.data());
            const std::vector<int64_t> got_evicted = m.evict();
            if (step < interval)
                continue;
            // How many rows each pass evicts (which ones: the new ids' rows are chosen apart),
            // after the first, whose free slots TorchRec reports as evicted rows.
            if (step > interval)
                CHECK(got_evicted.size() == evicted.size());
            std::vector<int64_t> got_hit;
            for (size_t i = 0; i < ids.size(); ++i)
                got_hit.push_back(m.slot_of(ids[i]) >= 0 && rows[i] == m.slot_of(ids[i]) ? 1 : 0);
            CHECK(got_hit == hit);
            const std::vector<uint64_t> slots = m.state().slot_ids;
            std::vector<int64_t> got_map(slots.begin(), slots.end());
            std::sort(got_map.begin(), got_map.end());
            CHECK(got_map == map);
            evictions = m.evictions_total();
        }
        CHECK(evictions > 0);
        ++cases;
    }
    CHECK(cases == 24);
}

TEST_CASE("managed collision matches the reference on a large table with many evictions", "[mc]") {
    // Thousands of slots turned over at every pass: the id tables grow, and erase and reinsert
    // ids in long probe runs; every step's rows and evictions are the reference's.
    for (EvictionPolicy policy :
         {EvictionPolicy::kLfu, EvictionPolicy::kLru, EvictionPolicy::kDistanceLfu}) {
        for (const char* filter : {"none", "average"}) {
            ManagedCollisionOptions o;
            o.zch_size = 1500;
            o.eviction_policy = policy;
            o.eviction_interval = 4;
            REQUIRE(parse_threshold_filter(filter, &o.threshold).empty());
            INFO("policy " << eviction_policy_name(policy) << " threshold " << filter);
            MCHManagedCollisionModule m("t", o);
            ref::ManagedCollisionRef r(to_ref(o));
            int64_t evicted = 0;
            for (const auto& batch : shifting_stream(12, 48, 600, 20000, 24)) {
                REQUIRE(forward(m, batch) == r.forward(batch));
                const std::vector<int64_t> rows = m.evict();
                REQUIRE(rows == r.evict());
                evicted += static_cast<int64_t>(rows.size());
            }
            REQUIRE(m.occupancy() == static_cast<int64_t>(r.id_to_slot().size()));
            for (const auto& [id, slot] : r.id_to_slot()) {
                REQUIRE(m.slot_of(static_cast<int64_t>(id)) == slot);
            }
            REQUIRE(evicted > 500);
        }
    }
}

TEST_CASE("managed collision matches the reference when few of many slots change hands", "[mc]") {
    // 17000 slots and a few thousand candidates a pass: the pass lists only the incumbents below
    // a sampled score threshold; the evictions must be the reference's all the same.
    // (lfu keeps its old ids here: their counts stay higher than the new ones').
    for (const auto& [policy, decay] :
         std::vector<std::pair<EvictionPolicy, double>>{{EvictionPolicy::kLru, 1.0},
                                                        {EvictionPolicy::kDistanceLfu, 1.0},
                                                        {EvictionPolicy::kDistanceLfu, 2.0}}) {
        ManagedCollisionOptions o;
        o.zch_size = 17000;
        o.eviction_policy = policy;
        o.decay_exponent = decay;
        o.eviction_interval = 1;
        INFO("policy " << eviction_policy_name(policy) << " decay " << decay);
        MCHManagedCollisionModule m("t", o);
        ref::ManagedCollisionRef r(to_ref(o));
        int64_t evicted = 0;
        for (const auto& batch : shifting_stream(21, 12, 6000, 24000, 6)) {
            REQUIRE(forward(m, batch) == r.forward(batch));
            const std::vector<int64_t> rows = m.evict();
            REQUIRE(rows == r.evict());
            evicted += static_cast<int64_t>(rows.size());
        }
        REQUIRE(evicted > 0);
    }
}

TEST_CASE("managed collision matches the reference with a batch's ids on 1, 2 or 3 threads",
          "[mc]") {
    // Batches of 6000 ids (past the size profile and remap split over the CPU threads): each
    // thread counts the ids of its part, so the rows, evictions and state must not depend on the
    // thread count, and stay the reference's.
    const int restore = kernels::cpu_threads();
    for (const int threads : {1, 2, 3}) {
        kernels::set_cpu_threads(threads);
        ManagedCollisionOptions o;
        o.zch_size = 3000;
        o.eviction_policy = EvictionPolicy::kDistanceLfu;
        o.eviction_interval = 3;
        REQUIRE(parse_threshold_filter("average", &o.threshold).empty());
        INFO("threads " << threads);
        MCHManagedCollisionModule m("t", o);
        ref::ManagedCollisionRef r(to_ref(o));
        int64_t evicted = 0;
        for (const auto& batch : shifting_stream(31, 12, 6000, 30000, 6)) {
            REQUIRE(forward(m, batch) == r.forward(batch));
            const std::vector<int64_t> rows = m.evict();
            REQUIRE(rows == r.evict());
            evicted += static_cast<int64_t>(rows.size());
            std::vector<int64_t> out(batch.size());
            const int64_t hits =
                m.remap(batch.data(), static_cast<int64_t>(batch.size()), out.data());
            REQUIRE(out == r.remap(batch));
            CHECK(hits == owning(m, out));
        }
        REQUIRE(evicted > 500);
        for (const auto& [id, slot] : r.id_to_slot()) {
            REQUIRE(m.slot_of(static_cast<int64_t>(id)) == slot);
        }
    }
    kernels::set_cpu_threads(restore);
}

TEST_CASE("ManagedCollisionBins: each bucket gets its ids and places, by part in input order",
          "[mc]") {
    // Three ranges of 9000 raw ids at scattered places, over 3 buckets, on 1, 2 and 3 threads:
    // bucket b holds exactly the ids managed_collision_bucket puts in b, each with its place and
    // its input-hashed value; a bin holds one part's ids (the same part in every chunk); the
    // concatenation of a part's bins over the chunks is that part's ids in input order, whatever
    // the thread count.
    const int restore = kernels::cpu_threads();
    for (const uint64_t hash_size : {uint64_t{1} << 63, uint64_t{1000003}}) {
        rng::Rng r(5);
        std::vector<std::vector<int64_t>> ids(3);
        std::vector<ManagedCollisionRange> ranges;
        for (size_t k = 0; k < ids.size(); ++k) {
            for (int i = 0; i < 3000; ++i)
                ids[k].push_back(static_cast<int64_t>(r.next_u64()));
            ranges.push_back({ids[k].data(), 3000, 100000 * k + 7});
        }
        constexpr int64_t K = 3, P = kManagedCollisionParts;
        // [threads][bucket][part]: the part's (place, id) over the chunks, in order
        std::vector<std::vector<std::vector<std::vector<std::pair<size_t, uint64_t>>>>> parts;
        for (const int threads : {1, 2, 3}) {
            INFO("input_hash_size " << hash_size << ", threads " << threads);
            kernels::set_cpu_threads(threads);
            ManagedCollisionBins bins;
            bins.bin(ranges, hash_size, K);
            parts.emplace_back(K, std::vector<std::vector<std::pair<size_t, uint64_t>>>(P));
            for (int64_t b = 0; b < K; ++b) {
                const ManagedCollisionIds& got = bins.bucket(b);
                REQUIRE(got.chunks == threads);
                std::vector<std::pair<size_t, uint64_t>> expect, all;
                for (size_t k = 0; k < ids.size(); ++k) {
                    for (size_t i = 0; i < ids[k].size(); ++i) {
                        if (managed_collision_bucket(ids[k][i], hash_size, K) == b)
                            expect.emplace_back(100000 * k + 7 + i,
                                                static_cast<uint64_t>(ids[k][i]) % hash_size);
                    }
                }
                for (int64_t c = 0; c < got.chunks; ++c) {
                    for (int64_t p = 0; p < P; ++p) {
                        for (size_t j = got.bin_at[c * P + p]; j < got.bin_at[c * P + p + 1]; ++j)
                            parts.back()[b][p].emplace_back(got.ids[j].at, got.ids[j].id);
                    }
                }
                for (const auto& part : parts.back()[b]) {
                    REQUIRE(std::is_sorted(part.begin(), part.end()));
                    all.insert(all.end(), part.begin(), part.end());
                }
                REQUIRE(got.size() == expect.size());
                std::sort(all.begin(), all.end());
                REQUIRE(all == expect);
            }
        }
        REQUIRE(parts[1] == parts[0]);
        REQUIRE(parts[2] == parts[0]);
    }
    kernels::set_cpu_threads(restore);
}

TEST_CASE("managed collision: slots do not depend on the order of ids in a batch", "[mc]") {
    for (const char* policy : {"lfu", "lru", "distance_lfu"}) {
        ManagedCollisionOptions o;
        o.zch_size = 50;
        REQUIRE(parse_eviction_policy(policy, &o.eviction_policy));
        o.eviction_interval = 2;
        MCHManagedCollisionModule a("t", o), b("t", o);
        rng::Rng r(3);
        for (auto batch : shifting_stream(9, 30, 40, 300, 15)) {
            const std::vector<int64_t> rows_a = forward(a, batch);
            std::vector<size_t> perm(batch.size());
            for (size_t i = 0; i < perm.size(); ++i) {
                perm[i] = i;
            }
            for (size_t i = perm.size() - 1; i > 0; --i) {
                std::swap(perm[i], perm[static_cast<size_t>(r.randint(0, int64_t(i) + 1))]);
            }
            std::vector<int64_t> shuffled;
            for (size_t i : perm) {
                shuffled.push_back(batch[i]);
            }
            const std::vector<int64_t> rows_b = forward(b, shuffled);
            for (size_t i = 0; i < perm.size(); ++i) {
                REQUIRE(rows_b[i] == rows_a[perm[i]]);
            }
            REQUIRE(a.evict() == b.evict());
        }
        REQUIRE(a.state().slot_ids == b.state().slot_ids);
        REQUIRE(a.evictions_total() > 0);
    }
}

TEST_CASE("managed collision: with room for every id, each id keeps one slot forever", "[mc]") {
    for (const char* policy : {"lfu", "lru", "distance_lfu"}) {
        ManagedCollisionOptions o;
        o.zch_size = 301;  // 300 distinct ids plus the fallback slot
        REQUIRE(parse_eviction_policy(policy, &o.eviction_policy));
        o.eviction_interval = 1;
        MCHManagedCollisionModule m("t", o);
        std::map<int64_t, int64_t> first;
        std::set<int64_t> rows;
        for (const auto& batch : shifting_stream(4, 60, 50, 300, 60)) {  // no shift
            const std::vector<int64_t> out = forward(m, batch);
            REQUIRE(m.evict().empty());
            for (size_t i = 0; i < batch.size(); ++i) {
                const auto it = first.emplace(batch[i], out[i]).first;
                REQUIRE(it->second == out[i]);
                REQUIRE(out[i] < o.zch_size - 1);  // never the fallback row
                rows.insert(out[i]);
            }
        }
        REQUIRE(rows.size() == first.size());  // one row per id
    }
}

TEST_CASE("managed collision: after a shift lru and distance_lfu admit the new ids", "[mc]") {
    // Old ids 0..19 hot for 20 steps, then only new ids 100..119: with 20 usable slots, lru and
    // distance_lfu hand the slots to the new ids; lfu keeps the old ids (their counts are higher).
    for (const char* policy : {"lfu", "lru", "distance_lfu"}) {
        ManagedCollisionOptions o;
        o.zch_size = 21;
        REQUIRE(parse_eviction_policy(policy, &o.eviction_policy));
        o.eviction_interval = 5;
        MCHManagedCollisionModule m("t", o);
        std::vector<int64_t> out(20);
        for (int64_t t = 0; t < 40; ++t) {
            std::vector<int64_t> ids;
            for (int64_t i = 0; i < 20; ++i) {
                ids.push_back(t < 20 ? i : 100 + i);
            }
            m.forward(ids.data(), 20, out.data());
        }
        const bool lfu = std::string(policy) == "lfu";
        INFO(policy);
        REQUIRE((m.slot_of(105) >= 0) == !lfu);
        REQUIRE((m.slot_of(5) >= 0) == lfu);
    }
}

TEST_CASE("managed collision: distance_lfu's decay_exponent weighs recency against uses", "[mc]") {
    // One usable slot. Id 7 is used 7 times at step 1, id 9 once at steps 2 and 3; the pass at
    // step 3 ranks 7 at 7 / 3^decay and 9 at 2 / 1^decay: 7 keeps its slot at decay 0.5 (4.04)
    // and 1 (2.33), 9 takes it at decay 2 (0.78 < 2). lru gives it to 9 whatever the decay.
    for (const auto& [policy, decay, keeps] :
         std::vector<std::tuple<const char*, double, int64_t>>{{"distance_lfu", 0.5, 7},
                                                               {"distance_lfu", 1.0, 7},
                                                               {"distance_lfu", 2.0, 9},
                                                               {"lru", 0.5, 9},
                                                               {"lru", 2.0, 9}}) {
        ManagedCollisionOptions o;
        o.zch_size = 2;
        REQUIRE(parse_eviction_policy(policy, &o.eviction_policy));
        o.decay_exponent = decay;
        o.eviction_interval = 3;
        MCHManagedCollisionModule m("t", o);
        ref::ManagedCollisionRef r(to_ref(o));
        INFO(policy << " decay " << decay);
        for (const std::vector<int64_t>& batch :
             std::vector<std::vector<int64_t>>{std::vector<int64_t>(7, 7), {9}, {9}}) {
            REQUIRE(forward(m, batch) == r.forward(batch));
        }
        REQUIRE(m.slot_of(keeps) == 0);
        REQUIRE(r.id_to_slot() == std::map<uint64_t, int64_t>{{keeps, 0}});
    }
}

TEST_CASE("managed collision: state() and load_state() resume exactly", "[mc]") {
    ManagedCollisionOptions o;
    o.zch_size = 30;
    o.eviction_policy = EvictionPolicy::kDistanceLfu;
    o.eviction_interval = 4;
    o.mch_size = 5;
    // With a filter the state holds the interval's uses of the slots as well; stopped while the
    // slots fill (ids that took a free slot in the interval) and later.
    const std::string threshold = GENERATE("probabilistic:0.3", "average", "none");
    const size_t stop = GENERATE(2, 21);
    INFO(threshold << ", stopped after step " << stop);
    REQUIRE(parse_threshold_filter(threshold, &o.threshold).empty());
    const auto stream = shifting_stream(8, 40, 25, 150, 18);
    MCHManagedCollisionModule straight("t", o), first("t", o);
    std::vector<std::vector<int64_t>> expect;
    for (const auto& batch : stream) {
        expect.push_back(forward(straight, batch));
        const auto rows = straight.evict();
        expect.back().insert(expect.back().end(), rows.begin(), rows.end());
    }
    for (size_t t = 0; t < stop; ++t) {  // stops mid-interval, with evictions not yet returned
        forward(first, stream[t]);
        if (t + 1 != stop) {
            first.evict();
        }
    }
    MCHManagedCollisionModule resumed("t", o);
    resumed.load_state(first.state());
    for (size_t t = stop; t < stream.size(); ++t) {
        std::vector<int64_t> got = forward(resumed, stream[t]);
        if (t == stop) {
            REQUIRE(resumed.step() == static_cast<int64_t>(stop) + 1);
        }
        const auto rows = resumed.evict();
        got.insert(got.end(), rows.begin(), rows.end());
        if (t > stop) {
            REQUIRE(got == expect[t]);
        }
    }
    REQUIRE(resumed.evictions_total() == straight.evictions_total());
    REQUIRE(resumed.state().window_ids == straight.state().window_ids);
    // An id that input hashing cannot produce (>= 2^63) is not a state of this module.
    ManagedCollisionState bad = first.state();
    bad.slot_ids[0] = ~uint64_t{0};
    MCHManagedCollisionModule other("t", o);
    REQUIRE_THROWS_WITH(other.load_state(bad), Catch::Contains("beyond 2^63"));
}

TEST_CASE("managed collision: option parsing and checks", "[mc]") {
    ThresholdFilter f;
    REQUIRE(parse_threshold_filter("dynamic:10", &f).empty());
    REQUIRE(f.kind == ThresholdKind::kDynamic);
    REQUIRE(f.multiplier == 10);
    REQUIRE(threshold_filter_name(f) == "dynamic:10");
    REQUIRE(parse_threshold_filter("probabilistic:0.01", &f).empty());
    REQUIRE(f.probability == 0.01);
    REQUIRE_THAT(parse_threshold_filter("dynamic:0", &f), Catch::Contains("N >= 1"));
    REQUIRE_THAT(parse_threshold_filter("probabilistic:2", &f), Catch::Contains("0 < p <= 1"));
    REQUIRE_THAT(parse_threshold_filter("avg", &f), Catch::Contains("unknown threshold 'avg'"));
    REQUIRE_THAT(parse_threshold_filter("average:3", &f), Catch::Contains("no argument"));
    EvictionPolicy p;
    REQUIRE_FALSE(parse_eviction_policy("fifo", &p));
    ManagedCollisionOptions o;
    o.zch_size = 1;
    REQUIRE_THROWS_WITH(MCHManagedCollisionModule("user", o),
                        Catch::Contains("table user: managed_collision.zch_size must be >= 2"));
    o.zch_size = 8;
    o.eviction_interval = 0;
    REQUIRE_THROWS_WITH(MCHManagedCollisionModule("user", o),
                        Catch::Contains("eviction_interval must be >= 1"));
    o.eviction_interval = 1;
    o.decay_exponent = 0;
    REQUIRE_THROWS_WITH(MCHManagedCollisionModule("user", o),
                        Catch::Contains("decay_exponent must be a finite number > 0, not 0"));
}
