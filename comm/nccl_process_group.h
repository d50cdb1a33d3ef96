// NcclProcessGroup: the ProcessGroup of CUDA tensors over one NCCL communicator (TorchRec /
// c10d ProcessGroupNCCL). Bootstrap over MPI: rank 0 of the group makes the ncclUniqueId, the
// MPI group broadcasts it, and every rank builds its communicator on its node-local GPU.
// Sub-groups (intra-node, cross-node) come from ncclCommSplit. Every collective is enqueued on the
// group's stream (set_stream) and returns a Work whose wait() blocks the host until the stream
// has passed it; the wait polls ncclCommGetAsyncError and, after the timeout, aborts the
// communicator (ncclCommAbort) and throws naming the rank, host and collective, instead of
// hanging, naming the peers that did not arrive and where they are (comm/peer_probe.h; the host
// group over the same ranks, kept and split alongside, gives their world ranks). all_to_all_v is
// grouped ncclSend/ncclRecv; reduce_scatter_v and all_gather_v with unequal splits are grouped
// ncclReduce / ncclBroadcast, one root per rank. Compiled only with CUDA (SHARDREC_WITH_CUDA); no
// CUDA or NCCL type appears here (STYLE.md R1).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/core/device.h"
#include "engine/core/stream.h"

namespace shardrec::comm {

class NcclProcessGroup final : public ProcessGroup {
public:
    struct Comm;  // the ncclComm_t, destroyed (or aborted, after a failure) once

    // Collective over `bootstrap` (an MPI group of the ranks that will form this group).
    static std::shared_ptr<NcclProcessGroup> create(const std::shared_ptr<ProcessGroup>& bootstrap,
                                                    Device device,
                                                    double timeout_s,
                                                    const std::string& name = "world");
    // host: the host group over the same ranks (kept for splits), world_ranks its members by
    // group rank.
    NcclProcessGroup(std::shared_ptr<Comm> comm,
                     int rank,
                     int size,
                     std::string name,
                     Device device,
                     double timeout_s,
                     std::shared_ptr<ProcessGroup> host,
                     std::shared_ptr<const std::vector<int>> world_ranks);
    ~NcclProcessGroup() override;
    NcclProcessGroup(const NcclProcessGroup&) = delete;
    NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

    Device device() const { return device_; }

    double timeout_s() const { return timeout_s_; }

    // Collectives go on `stream` from now on (it must outlive its use); the default is a
    // non-blocking stream of the group's own.
    void set_stream(Stream& stream);

    Stream& stream() { return *stream_; }

    Work all_to_all_v(const Tensor& input,
                      const std::vector<int64_t>& input_splits,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work all_reduce(Tensor& tensor, ReduceOp op) override;
    Work reduce_scatter_v(const Tensor& input,
                          const std::vector<int64_t>& input_splits,
                          Tensor& output,
                          ReduceOp op) override;
    Work all_gather_v(const Tensor& input,
                      Tensor& output,
                      const std::vector<int64_t>& output_splits) override;
    Work broadcast(Tensor& tensor, int root) override;
    Work barrier() override;

    std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;

private:
    Work enqueued(const char* collective, std::vector<Tensor> keep);

    std::shared_ptr<Comm> comm_;
    Device device_;
    double timeout_s_;
    std::shared_ptr<ProcessGroup> host_;
    std::shared_ptr<const std::vector<int>> world_ranks_;
    int64_t posted_ = 0;  // collectives enqueued, for their names in the peer probes
    Stream own_stream_;
    Stream* stream_;
    Tensor barrier_buffer_;  // [1] f32 on the device
};

// The group for tensors on `device`: `host_group` itself for the CPU; for CUDA an NcclProcessGroup
// over the same ranks when every rank has a GPU of its own, else a StagedProcessGroup over
// host_group (collective over host_group; a CPU-only build throws).
std::shared_ptr<ProcessGroup> device_process_group(const std::shared_ptr<ProcessGroup>& host_group,
                                                   Device device,
                                                   double timeout_s);

}  // namespace shardrec::comm
