// The cached tiers: KeyValueStore's records and faults, HostRowStore's, and CachedEmbeddingShard's
// policies (LRU, LFU, the overflow area) with the TBE kernels running on its slots against the
// same kernels on the rows in memory, bit for bit, over either store.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/rng.h"
#include "engine/modules/cached_embedding_shard.h"
#include "engine/modules/embedding_config.h"
#include "engine/modules/host_row_store.h"
#include "engine/modules/key_value_store.h"
#include "kernels/embedding_bag.h"
#include "test/support/compare.h"

using namespace shardrec;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path;

    TempDir() {
        char pattern[] = "/tmp/shardrec-kv-XXXXXX";
        path = ::mkdtemp(pattern);
    }

    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::vector<char> payload(int64_t bytes, int64_t row) {
    std::vector<char> p(static_cast<size_t>(bytes));
    for (size_t i = 0; i < p.size(); ++i)
        p[i] = static_cast<char>(row * 31 + static_cast<int64_t>(i));
    return p;
}

CachedEmbeddingShard::Layout layout(int64_t rows, int64_t cols) {
    CachedEmbeddingShard::Layout l;
    l.table = "big";
    l.table_index = 2;
    l.num_embeddings = rows * 3;
    l.row_offset = rows;
    l.rows = rows;
    l.cols = cols;
    l.seed = 11;
    l.rank = 0;
    return l;
}

// The slower tier of a cached shard: a key_value file in `dir`, or host memory.
enum class Tier { kDisk, kHost };

std::unique_ptr<RowStore> store_for(Tier tier,
                                    const fs::path& dir,
                                    const CachedEmbeddingShard::Layout& l,
                                    const kernels::FusedOptimizerParams& optim = {}) {
    const int64_t pb = CachedEmbeddingShard::payload_bytes(l, optim);
    const std::string owner = CachedEmbeddingShard::owner(l);
    if (tier == Tier::kHost)
        return std::make_unique<HostRowStore>(owner, l.rows, pb);
    return std::make_unique<KeyValueStore>((dir / "t.kv").string(), owner, l.rows, pb);
}

// Distinct-row misses of one prefetch of `ids`.
int64_t misses_of(CachedEmbeddingShard& c, const std::vector<int64_t>& ids) {
    const int64_t before = c.stats().misses;
    Tensor slots;
    c.prefetch(Tensor::from_vector(ids), slots);
    return c.stats().misses - before;
}

}  // namespace

TEST_CASE("KeyValueStore: records round-trip, unwritten rows cost nothing", "[key_value]") {
    TempDir dir;
    const std::string path = (dir.path / "t.kv").string();
    KeyValueStore store(path, "table 'big' on rank 0", 100000, 70);
    CHECK(store.record_bytes() == 80);  // payload + crc + magic, 8-aligned
    const std::vector<int64_t> rows = {3, 99999, 50000};
    std::vector<char> src;
    for (int64_t r : rows) {
        const auto p = payload(70, r);
        src.insert(src.end(), p.begin(), p.end());
    }
    store.write(rows.data(), 3, src.data());
    CHECK(store.stored(3));
    CHECK(!store.stored(4));
    CHECK(store.stored_rows() == std::vector<int64_t>{3, 50000, 99999});
    std::vector<char> got(70);
    for (int64_t r : rows) {
        store.read(&r, 1, got.data());
        CHECK(got == payload(70, r));
    }
    // Three records, not the table's 100000; a rewrite stays in place.
    CHECK(fs::file_size(path) == 3u * 80u);
    store.write(rows.data(), 1, src.data());
    CHECK(fs::file_size(path) == 3u * 80u);
    CHECK(store.stored_count() == 3);
    store.clear();
    CHECK(fs::file_size(path) == 0u);
    CHECK(store.stored_count() == 0);
    CHECK(!store.stored(3));
}

// The store's own file in the page cache: mincore over a mapping of it counts its resident pages.
int64_t resident_bytes(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    const auto size = static_cast<size_t>(fs::file_size(path));
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(map != MAP_FAILED);
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in_core((size + page - 1) / page);
    REQUIRE(::mincore(map, size, in_core.data()) == 0);
    ::munmap(map, size);
    int64_t pages = 0;
    for (const unsigned char c : in_core)
        pages += c & 1;
    return pages * static_cast<int64_t>(page);
}

// Memory stays bounded: 256 MiB of records written, then read, leave at most the last 64 MiB of
// traffic (the store drops its pages every 64 MiB) and a call's worth in the page cache.
TEST_CASE("KeyValueStore: its file's pages leave the page cache as they are written and read",
          "[key_value]") {
    TempDir dir;

    struct statfs fs_info {};

    REQUIRE(::statfs(dir.path.c_str(), &fs_info) == 0);
    if (fs_info.f_type == 0x01021994) {  // TMPFS_MAGIC: its pages are the file itself
        test::not_run(dir.path.string() + " is a tmpfs");
        return;
    }
    const std::string path = (dir.path / "t.kv").string();
    const int64_t payload_bytes = 1016, per_call = 4096;  // 1 KiB records, 4 MiB a call
    const int64_t rows = 262144;                          // 256 MiB
    KeyValueStore store(path, "table 'big' on rank 0", rows, payload_bytes);
    REQUIRE(store.record_bytes() == 1024);
    std::vector<char> buf(static_cast<size_t>(per_call * payload_bytes), 'x');
    std::vector<int64_t> ids(static_cast<size_t>(per_call));
    const int64_t bound = (int64_t{64} << 20) + 2 * per_call * 1024;
    for (const bool writing : {true, false}) {
        INFO((writing ? "written" : "read"));
        for (int64_t first = 0; first < rows; first += per_call) {
            for (int64_t i = 0; i < per_call; ++i)
                ids[static_cast<size_t>(i)] = first + i;
            if (writing)
                store.write(ids.data(), per_call, buf.data());
            else
                store.read(ids.data(), per_call, buf.data());
        }
        const int64_t resident = resident_bytes(path);
        INFO(resident / 1048576.0 << " MiB of the 256 MiB file in the page cache");
        CHECK(resident <= bound);
    }
}

// Many rows in one call, in runs of consecutive records longer than one system call moves (1 MiB),
// rewrites among appends, a row twice in one write (the later payload wins), read back in any
// order.
TEST_CASE("KeyValueStore: runs of records read and write as one", "[key_value]") {
    TempDir dir;
    const int64_t pb = 1000, rows = 20000;
    KeyValueStore store((dir.path / "t.kv").string(), "table 'big' on rank 0", rows, pb);
    rng::Rng r(test::test_seed(), 3);
    std::vector<int64_t> expect(static_cast<size_t>(rows), -1);  // the seed of each row's payload
    for (int round = 0; round < 3; ++round) {
        std::vector<int64_t> ids;
        for (int i = 0; i < 3000; ++i)
            ids.push_back(static_cast<int64_t>(r.next_u64() % static_cast<uint64_t>(rows)));
        ids.push_back(ids.front());  // twice: the later one is stored
        std::vector<char> src;
        for (size_t i = 0; i < ids.size(); ++i) {
            const int64_t seed = round * 100000 + static_cast<int64_t>(i);
            const auto p = payload(pb, seed);
            src.insert(src.end(), p.begin(), p.end());
            expect[static_cast<size_t>(ids[i])] = seed;
        }
        store.write(ids.data(), static_cast<int64_t>(ids.size()), src.data());
    }
    std::vector<int64_t> stored;
    for (int64_t row = rows - 1; row >= 0; --row) {  // descending: every run read backwards
        if (expect[static_cast<size_t>(row)] >= 0)
            stored.push_back(row);
    }
    REQUIRE(static_cast<int64_t>(stored.size()) == store.stored_count());
    std::vector<char> got(stored.size() * static_cast<size_t>(pb));
    store.read(stored.data(), static_cast<int64_t>(stored.size()), got.data());
    for (size_t i = 0; i < stored.size(); ++i) {
        INFO("row " << stored[i]);
        REQUIRE(std::vector<char>(got.begin() + static_cast<std::ptrdiff_t>(i * pb),
                                  got.begin() + static_cast<std::ptrdiff_t>((i + 1) * pb)) ==
                payload(pb, expect[static_cast<size_t>(stored[i])]));
    }
}

namespace {

int64_t rss_bytes() {  // VmRSS of this process
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0)
            return std::stoll(line.substr(6)) * 1024;
    }
    return -1;
}

}  // namespace

// A 100 GB reservation of which a run writes three rows: memory for those pages alone.
TEST_CASE("HostRowStore: records round-trip, unwritten rows cost no memory", "[key_value]") {
    const int64_t rows = 100000000, pb = 1000;
    const int64_t rss0 = rss_bytes();
    HostRowStore store("table 'big' on rank 0", rows, pb);
    const std::vector<int64_t> written = {3, rows - 1, 50000000};
    std::vector<char> src;
    for (int64_t r : written) {
        const auto p = payload(pb, r);
        src.insert(src.end(), p.begin(), p.end());
    }
    store.write(written.data(), 3, src.data());
    CHECK(store.stored(3));
    CHECK(!store.stored(4));
    CHECK(store.stored_rows() == std::vector<int64_t>{3, 50000000, rows - 1});
    CHECK(store.host_bytes() == 3 * pb);
    CHECK(store.disk_bytes() == 0);
    // The index (a byte a row, 100 MB) and the three rows' pages; not the 100 GB.
    CHECK(rss_bytes() - rss0 < 256 * 1024 * 1024);
    std::vector<char> got(static_cast<size_t>(pb));
    for (int64_t r : written) {
        store.read(&r, 1, got.data());
        CHECK(got == payload(pb, r));
    }
    std::vector<int64_t> scanned;
    store.scan(2, [&](const std::vector<int64_t>& rs, const char* payloads) {
        CHECK(rs.size() <= 2);
        for (size_t i = 0; i < rs.size(); ++i) {
            CHECK(std::vector<char>(payloads + i * pb, payloads + (i + 1) * pb) ==
                  payload(pb, rs[i]));
            scanned.push_back(rs[i]);
        }
    });
    CHECK(scanned == std::vector<int64_t>{3, 50000000, rows - 1});
    const int64_t five = 5;
    CHECK_THAT(test::error_of([&] { store.read(&five, 1, got.data()); }),
               Catch::Contains("table 'big' on rank 0") && Catch::Contains("row 5"));
    store.clear();
    CHECK(store.stored_rows().empty());
    CHECK(store.host_bytes() == 0);
}

// Rows written commit memory: once what the process may still allocate falls under the margin
// (1 GiB) the store stops the run naming the shard, its rows and the limit, checked every 256 MiB
// of new rows; with room, or nothing known, it goes on.
TEST_CASE("HostRowStore: stops before the memory runs out, naming the shard", "[key_value]") {
    const int64_t pb = int64_t{1} << 20, rows = 400;
    const std::vector<char> row(static_cast<size_t>(pb), 7);
    const auto fill = [&](HostRowStore& store) {
        for (int64_t r = 0; r < rows; ++r)
            store.write(&r, 1, row.data());
    };
    HostRowStore tight("table 'big' rows [0, 400) on rank 2", rows, pb, [] {
        return AvailableMemory{int64_t{512} << 20, "the test's limit"};
    });
    const std::string msg = test::error_of([&] { fill(tight); });
    CHECK_THAT(msg,
               Catch::Contains("table 'big' rows [0, 400) on rank 2: its rows in host memory have "
                               "grown to 256.0 MiB (256 rows written)") &&
                   Catch::Contains("may allocate only 512.0 MiB more (the test's limit)"));
    HostRowStore roomy("t", rows, pb, [] { return AvailableMemory{int64_t{64} << 30, "ample"}; });
    CHECK_NOTHROW(fill(roomy));
    HostRowStore unknown("t", rows, pb, [] { return AvailableMemory{}; });
    CHECK_NOTHROW(fill(unknown));
}

TEST_CASE("KeyValueStore: faults name the table, the file and the rank", "[key_value]") {
    TempDir dir;
    SECTION("a storage path that cannot hold files") {
        const std::string bad = (dir.path / "missing" / "t.kv").string();
        const std::string msg =
            test::error_of([&] { KeyValueStore store(bad, "table 'big' on rank 3", 10, 8); });
        CHECK_THAT(msg, Catch::Contains("table 'big' on rank 3") && Catch::Contains(bad) &&
                            Catch::Contains("cannot create"));
    }
    SECTION("a damaged record") {
        const std::string path = (dir.path / "t.kv").string();
        KeyValueStore store(path, "table 'big' on rank 1", 10, 16);
        const int64_t row = 7;
        store.write(&row, 1, payload(16, row).data());
        {
            std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(5);  // the first record
            f.put('\x7f');
        }
        std::vector<char> got(16);
        const std::string msg = test::error_of([&] { store.read(&row, 1, got.data()); });
        CHECK_THAT(msg, Catch::Contains("table 'big' on rank 1") && Catch::Contains(path) &&
                            Catch::Contains("damaged") && Catch::Contains("row 7"));
    }
    SECTION("a truncated file") {
        const std::string path = (dir.path / "t.kv").string();
        KeyValueStore store(path, "table 'big' on rank 2", 10, 16);
        const int64_t rows[] = {9, 4};
        for (int64_t row : rows)
            store.write(&row, 1, payload(16, row).data());
        fs::resize_file(path, static_cast<uintmax_t>(store.record_bytes()) + 3);
        const int64_t row = 4;  // the second record, cut short
        std::vector<char> got(16);
        const std::string msg = test::error_of([&] { store.read(&row, 1, got.data()); });
        CHECK_THAT(msg, Catch::Contains("table 'big' on rank 2") && Catch::Contains(path) &&
                            Catch::Contains("truncated"));
    }
    SECTION("a full disk") {
        // A 64 KiB tmpfs is a disk that fills; mounting one needs root (CI runs as root).
        const fs::path mnt = dir.path / "small";
        fs::create_directories(mnt);
        if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
            test::not_run("mounting a tmpfs needs root");
            return;
        }
        const std::string path = (mnt / "t.kv").string();
        std::string msg;
        {
            KeyValueStore store(path, "table 'big' on rank 0", 100000, 1000);
            msg = test::error_of([&] {
                for (int64_t r = 0; r < 1000; ++r)
                    store.write(&r, 1, payload(1000, r).data());
            });
        }
        ::umount(mnt.c_str());
        CHECK_THAT(msg, Catch::Contains("table 'big' on rank 0") && Catch::Contains(path) &&
                            Catch::Contains("No space left on device"));
    }
}

TEST_CASE("CachedEmbeddingShard: LRU evicts the least recently used row", "[key_value]") {
    TempDir dir;
    CachedEmbeddingShard c(layout(100, 4), {0.04, CacheAlgorithm::kLru, std::nullopt}, {},
                           store_for(Tier::kDisk, dir.path, layout(100, 4)));
    REQUIRE(c.slots() == 4);  // one set of 4 ways: the policy alone decides
    CHECK(misses_of(c, {0, 1, 2, 3}) == 4);
    CHECK(misses_of(c, {0, 2}) == 0);
    CHECK(misses_of(c, {3}) == 0);
    CHECK(misses_of(c, {4}) == 1);  // evicts 1, the least recently used
    CHECK(misses_of(c, {0, 2, 3, 4}) == 0);
    CHECK(misses_of(c, {1}) == 1);
}

TEST_CASE("CachedEmbeddingShard: LFU evicts the least frequently used row", "[key_value]") {
    TempDir dir;
    CachedEmbeddingShard c(layout(100, 4), {0.04, CacheAlgorithm::kLfu, std::nullopt}, {},
                           store_for(Tier::kDisk, dir.path, layout(100, 4)));
    CHECK(misses_of(c, {0, 1, 2, 3}) == 4);
    CHECK(misses_of(c, {1, 1, 2}) == 0);
    CHECK(misses_of(c, {0, 2}) == 0);
    CHECK(misses_of(c, {3, 3, 3}) == 0);
    // counts 0:2 1:3 2:3 3:4; LRU would evict 1 (used before 0's last use), LFU evicts 0.
    CHECK(misses_of(c, {4}) == 1);
    CHECK(misses_of(c, {1, 2, 3}) == 0);
    CHECK(misses_of(c, {0}) == 1);
}

// A managed-collision eviction: a row in the cache and a row in the store go back to their
// initial weights with a zero state; the others keep theirs.
TEST_CASE("CachedEmbeddingShard: reset_rows resets rows in the cache and in the store",
          "[key_value]") {
    for (const Tier tier : {Tier::kDisk, Tier::kHost}) {
        INFO("host tier " << (tier == Tier::kHost));
        TempDir dir;
        kernels::FusedOptimizerParams optim;
        optim.type = kernels::OptimType::kExactRowWiseAdagrad;
        const CachedEmbeddingShard::Layout l = layout(100, 4);
        CachedEmbeddingShard c(l, {0.04, CacheAlgorithm::kLru, std::nullopt}, optim,
                               store_for(tier, dir.path, l, optim));
        std::vector<int64_t> rows;
        for (int64_t r = 0; r < 10; ++r)
            rows.push_back(r);
        Tensor w = Tensor::empty({10, 4}, DType::kF32);
        Tensor g = Tensor::empty({10}, DType::kF32);
        std::fill(w.data<float>(), w.data<float>() + 40, 7.0f);
        std::fill(g.data<float>(), g.data<float>() + 10, 1.0f);
        std::vector<Tensor> states{g};
        c.write_rows(rows, w, states);
        CHECK(misses_of(c, {0, 1, 2, 3}) == 4);  // 1 is in the cache, 5 in the store
        c.reset_rows({1, 5});
        c.flush();
        Tensor got;
        std::vector<Tensor> got_states;
        c.read_rows({0, 1, 5, 6}, got, got_states);
        REQUIRE(got_states.size() == 1);
        for (int64_t i = 0; i < 4; ++i) {
            const int64_t row = std::vector<int64_t>{0, 1, 5, 6}[static_cast<size_t>(i)];
            INFO("row " << row);
            const bool reset = row == 1 || row == 5;
            Tensor init = Tensor::empty({1, 4}, DType::kF32);
            init_embedding_rows(init, l.seed, l.table_index, l.row_offset + row, l.col_offset,
                                l.num_embeddings);
            for (int64_t k = 0; k < 4; ++k)
                CHECK(got.data<float>()[i * 4 + k] == (reset ? init.data<float>()[k] : 7.0f));
            CHECK(got_states[0].data<float>()[i] == (reset ? 0.0f : 1.0f));
        }
        // The cache's own copy of row 1 too: a lookup now reads the reset row.
        Tensor slots;
        c.prefetch(Tensor::from_vector(std::vector<int64_t>{1}), slots);
        const int64_t slot = slots.data<int64_t>()[0];
        Tensor init = Tensor::empty({1, 4}, DType::kF32);
        init_embedding_rows(init, l.seed, l.table_index, l.row_offset + 1, l.col_offset,
                            l.num_embeddings);
        for (int64_t k = 0; k < 4; ++k)
            CHECK(c.weights.data<float>()[slot * 4 + k] == init.data<float>()[k]);
    }
}

// One set of 4 ways against a plain model of the policies: LRU by the batch of last use, LFU by
// the lookups of a row since the start (kept while it is out of the cache, as FBGEMM's
// lfu_state), ties to the least recent, then the lower way; a batch's own rows locked; a row
// with no way free going to the overflow area until the next batch. Misses batch by batch.
TEST_CASE("CachedEmbeddingShard: LRU and LFU decide as a plain model of them", "[key_value]") {
    for (const auto algorithm : {CacheAlgorithm::kLru, CacheAlgorithm::kLfu}) {
        INFO((algorithm == CacheAlgorithm::kLfu ? "lfu" : "lru"));
        TempDir dir;
        CachedEmbeddingShard c(layout(100, 4), {0.04, algorithm, std::nullopt}, {},
                               store_for(Tier::kDisk, dir.path, layout(100, 4)));
        REQUIRE(c.slots() == 4);
        std::vector<int64_t> way_row(4, -1), way_tick(4, 0), count(8, 0);
        rng::Rng r(test::test_seed(), 11);
        for (int64_t tick = 1; tick <= 300; ++tick) {
            std::vector<int64_t> ids;
            const int64_t n = 1 + static_cast<int64_t>(r.next_u64() % 6);
            for (int64_t i = 0; i < n; ++i)  // rows 0-2 often, 3-7 rarely
                ids.push_back(static_cast<int64_t>(r.next_u64() % 4 == 0 ? 3 + r.next_u64() % 5
                                                                         : r.next_u64() % 3));
            int64_t misses = 0;
            std::vector<int64_t> overflow;
            for (const int64_t row : ids) {
                auto way = std::find(way_row.begin(), way_row.end(), row);
                if (way != way_row.end()) {
                    way_tick[static_cast<size_t>(way - way_row.begin())] = tick;
                } else if (std::find(overflow.begin(), overflow.end(), row) == overflow.end()) {
                    ++misses;
                    int64_t best = -1;
                    for (int64_t w = 0; w < 4; ++w) {
                        const auto k = static_cast<size_t>(w);
                        if (way_row[k] < 0) {
                            best = w;
                            break;
                        }
                        if (way_tick[k] >= tick)
                            continue;  // locked
                        const auto key = [&](int64_t x) {
                            const auto y = static_cast<size_t>(x);
                            return algorithm == CacheAlgorithm::kLru
                                       ? std::make_pair(int64_t{0}, way_tick[y])
                                       : std::make_pair(count[static_cast<size_t>(way_row[y])],
                                                        way_tick[y]);
                        };
                        if (best < 0 || key(w) < key(best))
                            best = w;
                    }
                    if (best < 0) {
                        overflow.push_back(row);
                    } else {
                        way_row[static_cast<size_t>(best)] = row;
                        way_tick[static_cast<size_t>(best)] = tick;
                    }
                }
                ++count[static_cast<size_t>(row)];
            }
            INFO("batch " << tick);
            REQUIRE(misses_of(c, ids) == misses);
        }
    }
}

// The TBE forward and fused backward on the cache's slots against the same kernels on the rows
// in memory, for caches from one slot (every batch overflows) to every row, each optimizer.
TEST_CASE("CachedEmbeddingShard: the kernels on its slots train bitwise like rows in memory",
          "[key_value]") {
    const int64_t rows = 300, cols = 8, batch = 16;
    for (const Tier tier : {Tier::kDisk, Tier::kHost})
        for (const auto optim_type :
             {kernels::OptimType::kSgd, kernels::OptimType::kExactAdagrad,
              kernels::OptimType::kExactRowWiseAdagrad, kernels::OptimType::kAdam}) {
            for (const double load_factor : {1.0 / 300, 0.05, 0.5, 1.0}) {
                for (const auto algorithm : {CacheAlgorithm::kLru, CacheAlgorithm::kLfu}) {
                    for (const bool ahead : {false, true}) {
                        INFO("optimizer " << kernels::optim_type_name(optim_type) << " load_factor "
                                          << load_factor << " ahead " << ahead << " host tier "
                                          << (tier == Tier::kHost));
                        TempDir dir;
                        kernels::FusedOptimizerParams optim;
                        optim.type = optim_type;
                        optim.learning_rate = 0.1f;
                        optim.initial_accumulator_value = 0.25f;
                        const auto l = layout(rows, cols);
                        CachedEmbeddingShard cached(l, {load_factor, algorithm, std::nullopt},
                                                    optim, store_for(tier, dir.path, l, optim));
                        Tensor weights = Tensor::empty({rows, cols}, DType::kF32);
                        init_embedding_rows(weights, l.seed, l.table_index, l.row_offset,
                                            l.col_offset, l.num_embeddings);
                        Tensor state1, state2;
                        kernels::make_optimizer_states(optim, rows, cols, state1, state2);
                        const Tensor table_offsets = Tensor::from_vector<int64_t>({0, rows});
                        const Tensor feature_table = Tensor::zeros({1}, DType::kI32);
                        kernels::EmbeddingBackwardWorkspace ws_a, ws_b;
                        rng::Rng r(test::test_seed(), 5);
                        Tensor slots;
                        // The batches, made first: with `ahead`, batch i + 1's rows are prefetched
                        // ahead after batch i's prefetch, as the prefetch pipeline does.
                        std::vector<std::pair<Tensor, Tensor>> batches;
                        for (int step = 0; step < 7; ++step) {
                            std::vector<int64_t> ids, offsets = {0};
                            for (int64_t b = 0; b < batch; ++b) {
                                const int64_t n = static_cast<int64_t>(r.next_u64() % 4);
                                for (int64_t j = 0; j < n; ++j)  // hot rows and cold ones
                                    ids.push_back(
                                        static_cast<int64_t>(r.next_u64() % (j == 0 ? 8 : 300)));
                                offsets.push_back(static_cast<int64_t>(ids.size()));
                            }
                            batches.emplace_back(Tensor::from_vector(ids),
                                                 Tensor::from_vector(offsets));
                        }
                        for (int step = 0; step < 6; ++step) {
                            const Tensor& ids_t = batches[static_cast<size_t>(step)].first;
                            const Tensor& offsets_t = batches[static_cast<size_t>(step)].second;
                            Tensor out_a = Tensor::empty({batch, cols}, DType::kF32);
                            Tensor out_b = Tensor::empty({batch, cols}, DType::kF32);
                            kernels::embedding_bag_forward(weights, table_offsets, feature_table,
                                                           ids_t, offsets_t, nullptr,
                                                           PoolingMode::kSum, out_a, Stream::cpu());
                            cached.prefetch(ids_t, slots);
                            if (ahead)
                                cached.prefetch_ahead(batches[static_cast<size_t>(step) + 1].first);
                            kernels::embedding_bag_forward(cached.weights, cached.table_offsets,
                                                           feature_table, slots, offsets_t, nullptr,
                                                           PoolingMode::kSum, out_b, Stream::cpu());
                            REQUIRE(std::memcmp(out_a.data_ptr(), out_b.data_ptr(),
                                                out_a.nbytes()) == 0);
                            Tensor grad = Tensor::empty({batch, cols}, DType::kF32);
                            for (int64_t i = 0; i < grad.numel(); ++i)
                                grad.data<float>()[i] = r.uniform(-1.f, 1.f);
                            optim.step = step + 1;
                            kernels::embedding_bag_backward_fused(
                                grad, table_offsets, feature_table, ids_t, offsets_t, nullptr,
                                PoolingMode::kSum, optim, weights,
                                state1.defined() ? &state1 : nullptr,
                                state2.defined() ? &state2 : nullptr, ws_a, Stream::cpu());
                            kernels::embedding_bag_backward_fused(
                                grad, cached.table_offsets, feature_table, slots, offsets_t,
                                nullptr, PoolingMode::kSum, optim, cached.weights,
                                cached.state1.defined() ? &cached.state1 : nullptr,
                                cached.state2.defined() ? &cached.state2 : nullptr, ws_b,
                                Stream::cpu());
                            cached.mark_updated();
                        }
                        if (load_factor < 0.01)
                            CHECK(cached.stats().overflow > 0);
                        cached.flush();
                        std::vector<int64_t> all(static_cast<size_t>(rows));
                        for (int64_t i = 0; i < rows; ++i)
                            all[static_cast<size_t>(i)] = i;
                        Tensor w;
                        std::vector<Tensor> states;
                        cached.read_rows(all, w, states);
                        REQUIRE(std::memcmp(w.data_ptr(), weights.data_ptr(), w.nbytes()) == 0);
                        const std::vector<Tensor*> want = {&state1, &state2};
                        REQUIRE(states.size() ==
                                static_cast<size_t>(kernels::optim_num_states(optim_type)));
                        for (size_t i = 0; i < states.size(); ++i) {
                            REQUIRE(std::memcmp(states[i].data_ptr(), want[i]->data_ptr(),
                                                states[i].nbytes()) == 0);
                        }
                        // Only rows the optimizer changed are stored.
                        CHECK(cached.stored_rows().size() < static_cast<size_t>(rows));
                    }
                }
            }
        }
}

// A cache in f16 or bf16 over f32 rows: each row is rounded when it enters the cache and after
// each update, so after k steps it is within (k + 1) units of rounding of its magnitude of the
// f32 result (the gradients here do not depend on the rows); and it is not the f32 result.
TEST_CASE("CachedEmbeddingShard: a f16 or bf16 cache stays within its rounding", "[key_value]") {
    const int64_t rows = 300, cols = 8, batch = 16;
    const int steps = 6;
    for (const DType precision : {DType::kF16, DType::kBF16}) {
        for (const double load_factor : {0.05, 1.0}) {
            INFO(dtype_name(precision) << " load_factor " << load_factor);
            TempDir dir;
            kernels::FusedOptimizerParams optim;
            optim.type = kernels::OptimType::kExactAdagrad;
            optim.learning_rate = 0.1f;
            const auto l = layout(rows, cols);
            CachedEmbeddingShard cached(l, {load_factor, CacheAlgorithm::kLru, precision}, optim,
                                        store_for(Tier::kDisk, dir.path, l, optim));
            REQUIRE(cached.weights.dtype() == precision);
            Tensor weights = Tensor::empty({rows, cols}, DType::kF32);
            init_embedding_rows(weights, l.seed, l.table_index, l.row_offset, l.col_offset,
                                l.num_embeddings);
            Tensor state1, state2;
            kernels::make_optimizer_states(optim, rows, cols, state1, state2);
            const Tensor table_offsets = Tensor::from_vector<int64_t>({0, rows});
            const Tensor feature_table = Tensor::zeros({1}, DType::kI32);
            kernels::EmbeddingBackwardWorkspace ws_a, ws_b;
            rng::Rng r(test::test_seed(), 9);
            Tensor slots;
            for (int step = 0; step < steps; ++step) {
                std::vector<int64_t> ids, offsets = {0};
                for (int64_t b = 0; b < batch; ++b) {
                    ids.push_back(static_cast<int64_t>(r.next_u64() % rows));
                    offsets.push_back(static_cast<int64_t>(ids.size()));
                }
                const Tensor ids_t = Tensor::from_vector(ids),
                             offsets_t = Tensor::from_vector(offsets);
                Tensor grad = Tensor::empty({batch, cols}, DType::kF32);
                for (int64_t i = 0; i < grad.numel(); ++i)
                    grad.data<float>()[i] = r.uniform(-1.f, 1.f);
                optim.step = step + 1;
                kernels::embedding_bag_backward_fused(
                    grad, table_offsets, feature_table, ids_t, offsets_t, nullptr,
                    PoolingMode::kSum, optim, weights, &state1, nullptr, ws_a, Stream::cpu());
                cached.prefetch(ids_t, slots);
                kernels::embedding_bag_backward_fused(grad, cached.table_offsets, feature_table,
                                                      slots, offsets_t, nullptr, PoolingMode::kSum,
                                                      optim, cached.weights, &cached.state1,
                                                      nullptr, ws_b, Stream::cpu());
                cached.mark_updated();
            }
            cached.flush();
            std::vector<int64_t> all(static_cast<size_t>(rows));
            for (int64_t i = 0; i < rows; ++i)
                all[static_cast<size_t>(i)] = i;
            Tensor w;
            std::vector<Tensor> states;
            cached.read_rows(all, w, states);
            // Rounding errors are relative to the values a row takes on its way: bounded by the
            // row's largest value, at most 2x its larger end (the updates here are small).
            const double unit = precision == DType::kF16 ? 0x1p-11 : 0x1p-8;
            Tensor initial = Tensor::empty({rows, cols}, DType::kF32);
            init_embedding_rows(initial, l.seed, l.table_index, l.row_offset, l.col_offset,
                                l.num_embeddings);
            double worst = 0;
            bool differs = false;
            for (int64_t row = 0; row < rows; ++row) {
                double scale = 0;
                for (int64_t c = 0; c < cols; ++c) {
                    scale =
                        std::max({scale, std::fabs(double(weights.data<float>()[row * cols + c])),
                                  std::fabs(double(initial.data<float>()[row * cols + c]))});
                }
                for (int64_t c = 0; c < cols; ++c) {
                    const float got = w.data<float>()[row * cols + c];
                    const float want = weights.data<float>()[row * cols + c];
                    differs = differs || got != want;
                    worst = std::max(worst, std::fabs(double(got) - want) / (unit * 2 * scale));
                }
            }
            INFO("worst difference in units of rounding of the row's scale: " << worst);
            CHECK(worst <= steps + 1);
            CHECK(differs);
        }
    }
}
