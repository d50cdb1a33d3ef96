// ProcessGroup: the collectives the engine uses, over a group of ranks (TorchRec / c10d names).
// Every collective is asynchronous: it returns a Work whose wait() completes it, so communication
// can overlap compute. Tensors must stay alive and unchanged (inputs) or untouched (outputs) until
// wait() returns. Splits and counts are in ELEMENTS of the tensor's dtype; segments are laid out
// contiguously in rank order. Every rank of the group must call every collective in the same
// order. Errors (a failed call, a peer that died, mismatched sizes) throw shardrec::Error naming
// the rank, the host and the collective.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// Completion of one asynchronous collective. Waiting twice is a no-op; a Work that is destroyed
// without wait() is waited for in its destructor (never leaked mid-flight).
class WorkImpl {
public:
    virtual ~WorkImpl() = default;
    virtual void wait() = 0;
    virtual bool is_completed() = 0;

    // Completes a Work dropped without wait() (Work's destructor, move-assignment); may throw.
    // A backend whose group already failed returns at once instead of waiting out its timeout.
    virtual void drop() { wait(); }
};

class [[nodiscard]] Work {
public:
    Work() = default;  // already complete

    explicit Work(std::unique_ptr<WorkImpl> impl) : impl_(std::move(impl)) {}

    Work(Work&&) noexcept = default;
    Work& operator=(Work&& other) noexcept;  // waits for the collective it replaces
    Work(const Work&) = delete;
    Work& operator=(const Work&) = delete;
    ~Work();

    void wait();
    bool is_completed();

private:
    std::unique_ptr<WorkImpl> impl_;
};

class ProcessGroup {
public:
    virtual ~ProcessGroup() = default;

    int rank() const { return rank_; }

    int size() const { return size_; }

    const std::string& name() const { return name_; }  // "world", "intra_node", "cross_node", ...

    // input: segment r (input_splits[r] elements) goes to rank r; output: segment r
    // (output_splits[r] elements) comes from rank r. Same dtype both sides.
    virtual Work all_to_all_v(const Tensor& input,
                              const std::vector<int64_t>& input_splits,
                              Tensor& output,
                              const std::vector<int64_t>& output_splits) = 0;
    // In place. kAvg divides the sum by size() (floats only).
    virtual Work all_reduce(Tensor& tensor, ReduceOp op) = 0;
    // input holds size() segments (input_splits[r] elements for rank r); output (input_splits[rank]
    // elements) is the reduction over ranks of my segment.
    virtual Work reduce_scatter_v(const Tensor& input,
                                  const std::vector<int64_t>& input_splits,
                                  Tensor& output,
                                  ReduceOp op) = 0;
    // output holds size() segments, output_splits[r] elements from rank r; input has
    // output_splits[rank] elements.
    virtual Work all_gather_v(const Tensor& input,
                              Tensor& output,
                              const std::vector<int64_t>& output_splits) = 0;
    virtual Work broadcast(Tensor& tensor, int root) = 0;
    virtual Work barrier() = 0;

    // A sub-group of the ranks that pass the same color, ordered by key (MPI_Comm_split).
    virtual std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) = 0;

protected:
    ProcessGroup(int rank, int size, std::string name)
        : rank_(rank), size_(size), name_(std::move(name)) {}

    // The argument checks of the collectives, the same for every backend (each checks its
    // tensors' devices itself): they throw an Error naming the collective and the argument.
    void check_all_to_all_v(const char* collective,
                            const Tensor& input,
                            const std::vector<int64_t>& input_splits,
                            const Tensor& output,
                            const std::vector<int64_t>& output_splits) const;
    void check_reduce_scatter_v(const char* collective,
                                const Tensor& input,
                                const std::vector<int64_t>& input_splits,
                                const Tensor& output) const;
    void check_all_gather_v(const char* collective,
                            const Tensor& input,
                            const Tensor& output,
                            const std::vector<int64_t>& output_splits) const;
    void check_root(const char* collective, int root) const;

private:
    int rank_;
    int size_;
    std::string name_;
};

// The world group over MPI_COMM_WORLD for host tensors (comm::init_process must have run).
std::shared_ptr<ProcessGroup> world_process_group();

// TorchRec intra_and_cross_node_pg: ranks of my node (local_size of them, consecutive), and the
// ranks with my local rank on every node. The local size comes from the bootstrap
// (SHARDREC_LOCAL_SIZE emulates several nodes on one machine).
struct IntraAndCrossNodeGroups {
    std::shared_ptr<ProcessGroup> intra;
    std::shared_ptr<ProcessGroup> cross;
};

IntraAndCrossNodeGroups intra_and_cross_node_pg(ProcessGroup& world, int local_size);

}  // namespace shardrec::comm
