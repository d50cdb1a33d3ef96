// NcclProcessGroup: argument checks on this rank (so a mistake throws here instead of hanging
// the peers), then the NCCL calls on the group's stream and an event-backed Work.
#include "comm/nccl_process_group.h"

#if SHARDREC_WITH_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/collective_utils.h"
#include "comm/mpi_env.h"
#include "comm/nccl_check.h"
#include "comm/peer_probe.h"
#include "engine/core/cuda/cuda_check.h"
#include "engine/core/log.h"

namespace shardrec::comm {

// ---- the communicator ----

struct NcclProcessGroup::Comm {
    ncclComm_t comm = nullptr;
    std::mutex mutex;
    bool aborted = false;

    ~Comm() {
        if (comm != nullptr && !aborted) {
            const ncclResult_t rc = ncclCommDestroy(comm);
            if (rc != ncclSuccess)
                log::all().warn("ncclCommDestroy failed: {}", ncclGetErrorString(rc));
        }
    }

    bool is_aborted() {
        const std::lock_guard<std::mutex> lock(mutex);
        return aborted;
    }

    // After a timeout or an asynchronous error: the communicator cannot be trusted again, and
    // aborting it frees the kernels stuck in it so the process can report and exit.
    void abort() {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!aborted && comm != nullptr) {
            ncclCommAbort(comm);
            aborted = true;
        }
    }
};

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return ncclFloat32;
        case DType::kF16:
            return ncclFloat16;
        case DType::kBF16:
            return ncclBfloat16;
        case DType::kI32:
            return ncclInt32;
        case DType::kI64:
            return ncclInt64;
        case DType::kI8:
            return ncclInt8;
        case DType::kU8:
            return ncclUint8;
    }
    SR_CHECK(false, "no NCCL datatype for dtype {}", static_cast<int>(dtype));
    return ncclFloat32;
}

bool is_float(DType dtype) {
    return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

ncclRedOp_t nccl_op(const char* collective, ReduceOp op, DType dtype) {
    switch (op) {
        case ReduceOp::kSum:
            return ncclSum;
        case ReduceOp::kAvg:
            SR_CHECK(is_float(dtype), "{}: ReduceOp::kAvg needs a float tensor, got {}", collective,
                     dtype_name(dtype));
            return ncclAvg;
        case ReduceOp::kMax:
            return ncclMax;
        case ReduceOp::kMin:
            return ncclMin;
    }
    return ncclSum;
}

bool all_equal(const std::vector<int64_t>& v) {
    for (const int64_t x : v) {
        if (x != v.front())
            return false;
    }
    return true;
}

char* element_ptr(const Tensor& t, int64_t offset) {
    return static_cast<char*>(const_cast<void*>(t.data_ptr())) +
           offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

// The Work of one collective: an event recorded on the group's stream after the NCCL calls.
class NcclWork final : public WorkImpl {
public:
    NcclWork(const char* collective,
             const NcclProcessGroup& pg,
             std::shared_ptr<NcclProcessGroup::Comm> comm,
             Stream& stream,
             std::vector<Tensor> keep,
             int64_t sequence,
             std::shared_ptr<const std::vector<int>> world_ranks)
        : collective_(collective),
          group_(pg.name()),
          rank_(pg.rank()),
          size_(pg.size()),
          timeout_s_(pg.timeout_s()),
          sequence_(sequence),
          world_ranks_(std::move(world_ranks)),
          comm_(std::move(comm)),
          event_(pg.device()),
          keep_(std::move(keep)) {
        event_.record(stream);
    }

    // Polls the event and the communicator's asynchronous error until done or the deadline; the
    // peers are asked in the timeout's last tenth, as in MpiWork::wait.
    void wait() override {
        // No watchdog deadline (0): CUDA and NCCL's polls do not hold the thread, and the
        // failure below aborts the communicator, which may take a while.
        const WaitingIn waiting(collective_, group_, sequence_, *world_ranks_, 0);
        const auto start = Clock::now();
        PeerDeadline deadline(timeout_s_, *world_ranks_);
        while (!is_completed()) {
            const double waited = std::chrono::duration<double>(Clock::now() - start).count();
            if (!deadline.ask_when_due(waited, collective_, sequence_, group_,
                                       [this] { return is_completed(); })) {
                return;  // completed within the timeout after all
            }
            if (const std::optional<std::string> missing = deadline.expired(waited)) {
                fail(
                    fmt::format("did not complete within {} s (runtime.comm_timeout_s): {}; the "
                                "communicator is aborted",
                                timeout_s_, *missing));
            }
            std::this_thread::sleep_for(std::chrono::microseconds(waited < 5e-3 ? 0 : 100));
        }
    }

    bool is_completed() override {
        if (done_)
            return true;
        if (comm_->is_aborted())  // an aborted communicator must not be queried again
            fail("cannot complete: an earlier failure aborted the communicator");
        ncclResult_t async = ncclSuccess;
        const ncclResult_t rc = ncclCommGetAsyncError(comm_->comm, &async);
        if (rc != ncclSuccess || async != ncclSuccess) {
            fail("NCCL reported an asynchronous error: " +
                 nccl_error_string(rc != ncclSuccess ? rc : async, comm_->comm));
        }
        done_ = event_.query();
        if (done_)
            keep_.clear();
        return done_;
    }

private:
    [[noreturn]] void fail(const std::string& why) {
        comm_->abort();
        throw_error("wait", collective_, __FILE__, __LINE__,
                    fmt::format("{} on NCCL group '{}' (rank {} of {}, its collective #{}) {}",
                                collective_, group_, rank_, size_, sequence_, why));
    }

    const char* collective_;
    std::string group_;
    int rank_;
    int size_;
    double timeout_s_;
    int64_t sequence_;
    std::shared_ptr<const std::vector<int>> world_ranks_;
    std::shared_ptr<NcclProcessGroup::Comm> comm_;
    Event event_;
    std::vector<Tensor> keep_;  // the tensors the collective reads or writes
    bool done_ = false;
};

// NCCL calls between ncclGroupStart and ncclGroupEnd, ended even when a call throws.
class NcclGroup {
public:
    NcclGroup() { SR_NCCL_CHECK(ncclGroupStart(), nullptr); }

    ~NcclGroup() {
        if (!ended_)
            ncclGroupEnd();
    }

    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;

    void end(ncclComm_t comm) {
        ended_ = true;
        SR_NCCL_CHECK(ncclGroupEnd(), comm);
    }

private:
    bool ended_ = false;
};

}  // namespace

// ---- group lifetime ----

namespace {

// The world ranks of a host group's members, by group rank (collective over it).
std::shared_ptr<const std::vector<int>> world_ranks_of(ProcessGroup& host) {
    const std::vector<int64_t> ranks = all_gather_int64(host, process_info().rank);
    return std::make_shared<const std::vector<int>>(ranks.begin(), ranks.end());
}

}  // namespace

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(
    const std::shared_ptr<ProcessGroup>& bootstrap_group,
    Device device,
    double timeout_s,
    const std::string& name) {
    SR_CHECK(device.is_cuda(), "NcclProcessGroup: device {} is not a CUDA device", device.str());
    ProcessGroup& bootstrap = *bootstrap_group;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (bootstrap.rank() == 0)
        SR_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    Tensor bytes = Tensor::from_blob(&id, {static_cast<int64_t>(sizeof(id))}, DType::kU8);
    bootstrap.broadcast(bytes, 0).wait();
    SR_CUDA_CHECK(cudaSetDevice(device.index));
    auto comm = std::make_shared<Comm>();
    SR_NCCL_CHECK(ncclCommInitRank(&comm->comm, bootstrap.size(), id, bootstrap.rank()), nullptr);
    return std::make_shared<NcclProcessGroup>(std::move(comm), bootstrap.rank(), bootstrap.size(),
                                              name, device, timeout_s, bootstrap_group,
                                              world_ranks_of(bootstrap));
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Comm> comm,
                                   int rank,
                                   int size,
                                   std::string name,
                                   Device device,
                                   double timeout_s,
                                   std::shared_ptr<ProcessGroup> host,
                                   std::shared_ptr<const std::vector<int>> world_ranks)
    : ProcessGroup(rank, size, std::move(name)),
      comm_(std::move(comm)),
      device_(device),
      timeout_s_(timeout_s),
      host_(std::move(host)),
      world_ranks_(std::move(world_ranks)),
      own_stream_(device),
      stream_(&own_stream_),
      barrier_buffer_(Tensor::zeros({1}, DType::kF32, device)) {}

NcclProcessGroup::~NcclProcessGroup() = default;

void NcclProcessGroup::set_stream(Stream& stream) {
    SR_CHECK(stream.device() == device_, "NcclProcessGroup '{}': a stream on {} for a group on {}",
             name(), stream.device().str(), device_.str());
    stream_ = &stream;
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::split(int color, int key, const std::string& name) {
    SR_CHECK(color >= 0, "split '{}': color {} must be >= 0", name, color);
    auto sub = std::make_shared<Comm>();
    SR_NCCL_CHECK(ncclCommSplit(comm_->comm, color, key, &sub->comm, nullptr), comm_->comm);
    int rank = 0, size = 0;
    SR_NCCL_CHECK(ncclCommUserRank(sub->comm, &rank), sub->comm);
    SR_NCCL_CHECK(ncclCommCount(sub->comm, &size), sub->comm);
    // The same split of the host group gives the members' world ranks (the peer probes').
    std::shared_ptr<ProcessGroup> host = host_->split(color, key, name);
    std::shared_ptr<const std::vector<int>> members = world_ranks_of(*host);
    return std::make_shared<NcclProcessGroup>(std::move(sub), rank, size, name, device_, timeout_s_,
                                              std::move(host), std::move(members));
}

Work NcclProcessGroup::enqueued(const char* collective, std::vector<Tensor> keep) {
    return Work(std::make_unique<NcclWork>(collective, *this, comm_, *stream_, std::move(keep),
                                           ++posted_, world_ranks_));
}

// ---- collectives ----

namespace {

void check_device(const char* collective, const Tensor& t, const char* what, Device device) {
    SR_CHECK(t.defined(), "{}: {} is undefined", collective, what);
    SR_CHECK(t.device() == device, "{}: the NCCL group runs on {}, but {} is {}", collective,
             device.str(), what, t.str());
}

}  // namespace

Work NcclProcessGroup::all_to_all_v(const Tensor& input,
                                    const std::vector<int64_t>& input_splits,
                                    Tensor& output,
                                    const std::vector<int64_t>& output_splits) {
    const char* const kName = "all_to_all_v";
    SR_CHECK(!comm_->is_aborted(), "{}: NCCL group '{}' was aborted by an earlier failure", kName,
             name());
    check_device(kName, input, "input", device_);
    check_device(kName, output, "output", device_);
    check_all_to_all_v(kName, input, input_splits, output, output_splits);
    const ncclDataType_t type = nccl_type(input.dtype());
    const auto s = static_cast<cudaStream_t>(stream_->handle());
    NcclGroup group;
    int64_t send_off = 0, recv_off = 0;
    for (int r = 0; r < size(); ++r) {
        const auto send = static_cast<size_t>(input_splits[static_cast<size_t>(r)]);
        const auto recv = static_cast<size_t>(output_splits[static_cast<size_t>(r)]);
        if (send > 0)
            SR_NCCL_CHECK(ncclSend(element_ptr(input, send_off), send, type, r, comm_->comm, s),
                          comm_->comm);
        if (recv > 0)
            SR_NCCL_CHECK(ncclRecv(element_ptr(output, recv_off), recv, type, r, comm_->comm, s),
                          comm_->comm);
        send_off += static_cast<int64_t>(send);
        recv_off += static_cast<int64_t>(recv);
    }
    group.end(comm_->comm);
    return enqueued(kName, {input, output});
}

Work NcclProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) {
    const char* const kName = "all_reduce";
    SR_CHECK(!comm_->is_aborted(), "{}: NCCL group '{}' was aborted by an earlier failure", kName,
             name());
    check_device(kName, tensor, "tensor", device_);
    const ncclRedOp_t nop = nccl_op(kName, op, tensor.dtype());
    SR_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(),
                                static_cast<size_t>(tensor.numel()), nccl_type(tensor.dtype()), nop,
                                comm_->comm, static_cast<cudaStream_t>(stream_->handle())),
                  comm_->comm);
    return enqueued(kName, {tensor});
}

Work NcclProcessGroup::reduce_scatter_v(const Tensor& input,
                                        const std::vector<int64_t>& input_splits,
                                        Tensor& output,
                                        ReduceOp op) {
    const char* const kName = "reduce_scatter_v";
    SR_CHECK(!comm_->is_aborted(), "{}: NCCL group '{}' was aborted by an earlier failure", kName,
             name());
    check_device(kName, input, "input", device_);
    check_device(kName, output, "output", device_);
    check_reduce_scatter_v(kName, input, input_splits, output);
    const ncclDataType_t type = nccl_type(input.dtype());
    const ncclRedOp_t nop = nccl_op(kName, op, input.dtype());
    const auto s = static_cast<cudaStream_t>(stream_->handle());
    if (all_equal(input_splits)) {
        SR_NCCL_CHECK(
            ncclReduceScatter(input.data_ptr(), output.data_ptr(),
                              static_cast<size_t>(output.numel()), type, nop, comm_->comm, s),
            comm_->comm);
        return enqueued(kName, {input, output});
    }
    // Unequal segments: one reduction per root, fused by the group.
    NcclGroup group;
    int64_t off = 0;
    for (int r = 0; r < size(); ++r) {
        const auto n = static_cast<size_t>(input_splits[static_cast<size_t>(r)]);
        if (n > 0) {
            void* recv = r == rank() ? output.data_ptr() : nullptr;
            SR_NCCL_CHECK(
                ncclReduce(element_ptr(input, off), recv, n, type, nop, r, comm_->comm, s),
                comm_->comm);
        }
        off += static_cast<int64_t>(n);
    }
    group.end(comm_->comm);
    return enqueued(kName, {input, output});
}

Work NcclProcessGroup::all_gather_v(const Tensor& input,
                                    Tensor& output,
                                    const std::vector<int64_t>& output_splits) {
    const char* const kName = "all_gather_v";
    SR_CHECK(!comm_->is_aborted(), "{}: NCCL group '{}' was aborted by an earlier failure", kName,
             name());
    check_device(kName, input, "input", device_);
    check_device(kName, output, "output", device_);
    check_all_gather_v(kName, input, output, output_splits);
    const ncclDataType_t type = nccl_type(input.dtype());
    const auto s = static_cast<cudaStream_t>(stream_->handle());
    if (all_equal(output_splits)) {
        SR_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(),
                                    static_cast<size_t>(input.numel()), type, comm_->comm, s),
                      comm_->comm);
        return enqueued(kName, {input, output});
    }
    // Unequal segments: one broadcast per root into its place, fused by the group.
    NcclGroup group;
    int64_t off = 0;
    for (int r = 0; r < size(); ++r) {
        const auto n = static_cast<size_t>(output_splits[static_cast<size_t>(r)]);
        if (n > 0) {
            const void* send = r == rank() ? input.data_ptr() : nullptr;
            SR_NCCL_CHECK(ncclBroadcast(send, element_ptr(output, off), n, type, r, comm_->comm, s),
                          comm_->comm);
        }
        off += static_cast<int64_t>(n);
    }
    group.end(comm_->comm);
    return enqueued(kName, {input, output});
}

Work NcclProcessGroup::broadcast(Tensor& tensor, int root) {
    const char* const kName = "broadcast";
    SR_CHECK(!comm_->is_aborted(), "{}: NCCL group '{}' was aborted by an earlier failure", kName,
             name());
    check_device(kName, tensor, "tensor", device_);
    check_root(kName, root);
    SR_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                                static_cast<size_t>(tensor.numel()), nccl_type(tensor.dtype()),
                                root, comm_->comm, static_cast<cudaStream_t>(stream_->handle())),
                  comm_->comm);
    return enqueued(kName, {tensor});
}

// NCCL has no barrier: an all-reduce of one float completes only once every rank joined.
Work NcclProcessGroup::barrier() {
    SR_CHECK(!comm_->is_aborted(), "barrier: NCCL group '{}' was aborted by an earlier failure",
             name());
    SR_NCCL_CHECK(
        ncclAllReduce(barrier_buffer_.data_ptr(), barrier_buffer_.data_ptr(), 1, ncclFloat32,
                      ncclSum, comm_->comm, static_cast<cudaStream_t>(stream_->handle())),
        comm_->comm);
    return enqueued("barrier", {barrier_buffer_});
}

}  // namespace shardrec::comm

#endif  // SHARDREC_WITH_CUDA
