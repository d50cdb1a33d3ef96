// IdTable<V>: an open-addressing hash map from a 63-bit id to a small value V, for the managed
// collision module's per-id state. Linear probing in one flat array of {id, V} cells (a lookup
// touches one cache line, where std::unordered_map chases a node pointer), capacity a power of two
// kept at least twice the size. Robin Hood order: along a run of cells, no id sits farther from
// its home cell than one it passed, so a lookup of an absent id stops at the first cell nearer
// its home than the probe (near half full, linear probing's misses would scan about 2.3 cells, into
// cache lines not prefetched); erase by backward shift (no tombstones). Ids must be < 2^63: the
// all-ones word marks an empty cell. Iteration order is the hash order: callers that need an
// order sort what they collect. The cells come from HostAllocator (huge pages, shared by tables
// under 1 MiB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/core/allocator.h"

namespace shardrec {

template <class V>
class IdTable {
public:
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    struct Cell {
        uint64_t id = kEmpty;
        V value{};
    };

    size_t size() const { return size_; }

    // Room for n ids without growing.
    void reserve(size_t n) {
        if (2 * n > cells_.size()) {
            rehash(capacity_for(n));
        }
    }

    // Empties the table, keeping its capacity (the window refills to a similar size).
    void clear() {
        if (size_ != 0) {
            for (Cell& c : cells_) {
                c.id = kEmpty;
            }
            size_ = 0;
        }
    }

    const V* find(uint64_t id) const {
        const Cell* c = locate(id);
        return c == nullptr ? nullptr : &c->value;
    }

    V* find(uint64_t id) { return const_cast<V*>(static_cast<const IdTable&>(*this).find(id)); }

    // The value of id, value-initialised when new (*inserted says which).
    V& get_or_insert(uint64_t id, bool* inserted = nullptr) {
        if (2 * (size_ + 1) > cells_.size()) {
            rehash(capacity_for(size_ + 1));
        }
        size_t i = home(id), d = 0;
        for (; cells_[i].id != kEmpty && distance(cells_[i].id, i) >= d; i = (i + 1) & mask_, ++d) {
            if (cells_[i].id == id) {
                if (inserted != nullptr) {
                    *inserted = false;
                }
                return cells_[i].value;
            }
        }
        if (inserted != nullptr) {
            *inserted = true;
        }
        place(i, Cell{id, V{}});  // cell i is empty or nearer its home: the new id takes it
        return cells_[i].value;
    }

    // Removes id if present: the cells after it in its probe run move back to close the gap.
    bool erase(uint64_t id) {
        const Cell* c = locate(id);
        if (c == nullptr) {
            return false;
        }
        auto i = static_cast<size_t>(c - cells_.data());
        // The cells after it, up to an empty one or one at its home, each move back one.
        for (size_t j = (i + 1) & mask_; cells_[j].id != kEmpty && distance(cells_[j].id, j) > 0;
             j = (j + 1) & mask_) {
            cells_[i] = cells_[j];
            i = j;
        }
        cells_[i].id = kEmpty;
        --size_;
        return true;
    }

    // A hint that id is looked up soon (a batch loop issues it some ids ahead): its home cell and
    // the next, where a probe goes on and which for cells of 24 or 32 bytes is often on the next
    // cache line. Always inlined: GCC deems a function that only prefetches pure, and deletes
    // calls to it (the remap's loop had lost the next cell's prefetch).
    [[gnu::always_inline]] void prefetch(uint64_t id) const {
        if (!cells_.empty()) {
            const size_t h = home(id);
            __builtin_prefetch(&cells_[h]);
            __builtin_prefetch(&cells_[(h + 1) & mask_]);
        }
    }

    // f(id, value) for every entry, in hash order.
    template <class F>
    void for_each(F&& f) const {
        for (const Cell& c : cells_) {
            if (c.id != kEmpty) {
                f(c.id, c.value);
            }
        }
    }

    // The cells a table of n ids takes (a power of two, at least twice n).
    static size_t capacity_for(size_t n) {
        size_t cap = 16;
        while (cap < 2 * n) {
            cap *= 2;
        }
        return cap;
    }

private:
    size_t home(uint64_t id) const {
        // Fibonacci hashing of a folded id: the top bits of the product, spread for sequential ids.
        return static_cast<size_t>(((id ^ (id >> 32)) * 0x9E3779B97F4A7C15ull) >> shift_);
    }

    // How far cell i is past id's home.
    size_t distance(uint64_t id, size_t i) const { return (i - home(id)) & mask_; }

    // The cell of id, or null: the probe stops at an empty cell or one nearer its home.
    const Cell* locate(uint64_t id) const {
        if (cells_.empty()) {
            return nullptr;
        }
        for (size_t i = home(id), d = 0;; i = (i + 1) & mask_, ++d) {
            const Cell& c = cells_[i];
            if (c.id == id) {
                return &c;
            }
            if (c.id == kEmpty || distance(c.id, i) < d) {
                return nullptr;
            }
        }
    }

    // Inserts c (not present), probing from cell i on: c takes the first cell that is empty or
    // nearer its home than c would be, the cell it displaces goes on the same way, and so on until
    // one lands in an empty cell.
    void place(size_t i, Cell c) {
        for (size_t d = distance(c.id, i);; i = (i + 1) & mask_, ++d) {
            if (cells_[i].id == kEmpty) {
                cells_[i] = c;
                break;
            }
            const size_t di = distance(cells_[i].id, i);
            if (di < d) {
                std::swap(cells_[i], c);
                d = di;
            }
        }
        ++size_;
    }

    void rehash(size_t cap) {
        std::vector<Cell, HostAllocator<Cell>> old;
        old.swap(cells_);
        cells_.assign(cap, Cell{});
        mask_ = cap - 1;
        shift_ = 64;
        for (size_t c = cap; c > 1; c >>= 1) {
            --shift_;
        }
        size_ = 0;
        for (const Cell& c : old) {
            if (c.id != kEmpty) {
                place(home(c.id), c);
            }
        }
    }

    std::vector<Cell, HostAllocator<Cell>> cells_;
    size_t size_ = 0;
    size_t mask_ = 0;
    unsigned shift_ = 64;
};

}  // namespace shardrec
