// IdTable (engine/modules/id_table.h), the managed-collision module's open-addressing map, against
// std::unordered_map under random inserts, lookups and erases, with ids that collide in their
// home cells (so erase's backward shift moves runs that wrap around the array's end).
#include <catch2/catch.hpp>
#include <map>
#include <unordered_map>

#include "engine/core/rng.h"
#include "engine/modules/id_table.h"

using namespace shardrec;

TEST_CASE("id table: inserts, lookups, erases and clear agree with std::unordered_map", "[mc]") {
    for (const uint64_t range : {uint64_t{40}, uint64_t{5000}, uint64_t{1} << 62}) {
        INFO("id range " << range);
        IdTable<int64_t> table;
        std::unordered_map<uint64_t, int64_t> expect;
        rng::Rng r(range);
        for (int64_t op = 0; op < 60000; ++op) {
            // Small ranges: sequential ids and multiples of large powers of two (same top bits).
            uint64_t id = static_cast<uint64_t>(r.randint(0, 1 << 30)) % range;
            if (op % 3 == 0) {
                id = (id << 40) % range;
            }
            const int64_t what = r.randint(0, 10);
            if (what < 5) {
                bool inserted = false;
                table.get_or_insert(id, &inserted) = op;
                REQUIRE(inserted == (expect.count(id) == 0));
                expect[id] = op;
            } else if (what < 9) {
                REQUIRE(table.erase(id) == (expect.erase(id) == 1));
            } else {
                const int64_t* v = table.find(id);
                REQUIRE((v != nullptr) == (expect.count(id) == 1));
                if (v != nullptr) {
                    REQUIRE(*v == expect[id]);
                }
            }
            REQUIRE(table.size() == expect.size());
            if (op % 20000 == 19999) {  // every entry still found, nothing else listed
                std::map<uint64_t, int64_t> listed;
                table.for_each([&](uint64_t k, int64_t v) { listed[k] = v; });
                REQUIRE(listed == std::map<uint64_t, int64_t>(expect.begin(), expect.end()));
                for (const auto& [k, v] : expect) {
                    REQUIRE(table.find(k) != nullptr);
                    REQUIRE(*table.find(k) == v);
                }
            }
        }
        table.clear();
        REQUIRE(table.size() == 0);
        REQUIRE(table.find(expect.begin()->first) == nullptr);
    }
}
