// MpiProcessGroup: every collective checks its arguments on this rank (so a mistake throws here
// instead of hanging the peers), then posts non-blocking MPI calls into an MpiWork.
#include "comm/mpi_process_group.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <numeric>

#include "comm/mpi_check.h"
#include "comm/mpi_work.h"

namespace shardrec::comm {
namespace {

// ---- datatypes and argument checks ----

// Storage types; f16 and bf16 travel as 2-byte blobs, which MPI cannot reduce.
MPI_Datatype mpi_type(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return MPI_FLOAT;
        case DType::kF16:
        case DType::kBF16:
            return MPI_UINT16_T;
        case DType::kI32:
            return MPI_INT32_T;
        case DType::kI64:
            return MPI_INT64_T;
        case DType::kI8:
            return MPI_INT8_T;
        case DType::kU8:
            return MPI_UINT8_T;
    }
    SR_CHECK(false, "no MPI datatype for dtype {}", static_cast<int>(dtype));
    return MPI_DATATYPE_NULL;
}

MPI_Datatype mpi_reduce_type(const char* collective, DType dtype, ReduceOp op) {
    SR_CHECK(dtype != DType::kF16 && dtype != DType::kBF16,
             "{}: MpiProcessGroup cannot reduce {} (MPI has no 16-bit float type); reduce in f32",
             collective, dtype_name(dtype));
    SR_CHECK(op != ReduceOp::kAvg || dtype == DType::kF32,
             "{}: ReduceOp::kAvg needs a float tensor, got {}", collective, dtype_name(dtype));
    return mpi_type(dtype);
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:  // the sum, divided on completion
            return MPI_SUM;
        case ReduceOp::kMax:
            return MPI_MAX;
        case ReduceOp::kMin:
            return MPI_MIN;
    }
    return MPI_OP_NULL;
}

void check_host(const char* collective, const Tensor& t, const char* what) {
    SR_CHECK(t.defined(), "{}: {} is undefined", collective, what);
    SR_CHECK(t.device().is_cpu(), "{}: MpiProcessGroup takes host tensors, {} is {}", collective,
             what, t.str());
}

// A contiguous type of `block` elements, freed when it goes out of scope: MPI lets pending
// operations that use a freed type complete normally.
class BlockType {
public:
    BlockType(MPI_Datatype base, int64_t block) : type_(base) {
        if (block == 1) {
            return;
        }
        SR_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(block), base, &type_));
        SR_MPI_CHECK(MPI_Type_commit(&type_));
        derived_ = true;
    }

    ~BlockType() {
        if (derived_) {
            MPI_Type_free(&type_);
        }
    }

    BlockType(const BlockType&) = delete;
    BlockType& operator=(const BlockType&) = delete;

    MPI_Datatype get() const { return type_; }

private:
    MPI_Datatype type_;
    bool derived_ = false;
};

// Pointer to element `offset` of a host tensor.
char* element_ptr(Tensor& t, int64_t offset) {
    return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

void divide_by(Tensor t, int divisor) {
    float* p = t.data<float>();
    const float d = static_cast<float>(divisor);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
        p[i] /= d;
    }
}

int comm_rank(MPI_Comm comm) {
    int rank = 0;
    SR_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    return rank;
}

int comm_size(MPI_Comm comm) {
    int size = 0;
    SR_MPI_CHECK(MPI_Comm_size(comm, &size));
    return size;
}

// The MPI_COMM_WORLD rank of each rank of comm.
std::vector<int> world_ranks_of(MPI_Comm comm) {
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group world = MPI_GROUP_NULL;
    SR_MPI_CHECK(MPI_Comm_group(comm, &group));
    SR_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    const int n = comm_size(comm);
    std::vector<int> ranks(static_cast<size_t>(n));
    std::iota(ranks.begin(), ranks.end(), 0);
    std::vector<int> out(static_cast<size_t>(n));
    SR_MPI_CHECK(MPI_Group_translate_ranks(group, n, ranks.data(), world, out.data()));
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return out;
}

// MPI_Comm_set_errhandler runs before rank/size are queried so a failure there throws too.
MPI_Comm with_errors_return(MPI_Comm comm) {
    SR_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    return comm;
}

}  // namespace

// ---- group lifetime ----

double comm_timeout_s_from_env(double fallback) {
    const char* s = std::getenv("SHARDREC_COMM_TIMEOUT_S");
    if (s == nullptr || *s == '\0') {
        return fallback;
    }
    char* end = nullptr;
    const double t = std::strtod(s, &end);
    SR_CHECK(end != s && *end == '\0' && t >= 0,
             "SHARDREC_COMM_TIMEOUT_S='{}' is not a number of seconds >= 0 (0 waits forever)", s);
    return t;
}

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::string name, double timeout_s)
    : ProcessGroup(comm_rank(with_errors_return(comm)), comm_size(comm), std::move(name)),
      comm_(comm),
      timeout_s_(timeout_s),
      max_count_(INT_MAX),
      world_ranks_(std::make_shared<const std::vector<int>>(world_ranks_of(comm))) {}

MpiProcessGroup::~MpiProcessGroup() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) {
        MPI_Comm_free(&comm_);
    }
}

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::create_world() {
    int initialised = 0;
    MPI_Initialized(&initialised);
    SR_CHECK(initialised, "the world process group needs MPI: comm::init_process has not run");
    MPI_Comm comm = MPI_COMM_NULL;
    SR_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    return std::make_shared<MpiProcessGroup>(comm, "world", comm_timeout_s_from_env());
}

void MpiProcessGroup::set_max_count(int64_t max_count) {
    SR_CHECK(max_count >= 1 && max_count <= INT_MAX, "max_count {} is not in [1, INT_MAX]",
             max_count);
    max_count_ = max_count;
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::split(int color, int key, const std::string& name) {
    SR_CHECK(color >= 0, "split '{}': color {} must be >= 0", name, color);
    if (!failure_->error.empty()) {
        throw Error(failure_->error);
    }
    MPI_Comm sub = MPI_COMM_NULL;
    SR_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    auto group = std::make_shared<MpiProcessGroup>(sub, name, timeout_s_);
    group->set_max_count(max_count_);
    group->failure_ = failure_;
    return group;
}

std::shared_ptr<ProcessGroup> world_process_group() {
    // MPI_Comm_dup is collective: every rank makes the first call at the same point.
    static std::mutex mutex;
    static std::shared_ptr<ProcessGroup> world;
    const std::lock_guard<std::mutex> lock(mutex);
    if (!world) {
        world = MpiProcessGroup::create_world();
    }
    return world;
}

// ---- collectives ----

Work MpiProcessGroup::all_to_all_v(const Tensor& input,
                                   const std::vector<int64_t>& input_splits,
                                   Tensor& output,
                                   const std::vector<int64_t>& output_splits) {
    const char* const kName = "all_to_all_v";
    check_host(kName, input, "input");
    check_host(kName, output, "output");
    check_all_to_all_v(kName, input, input_splits, output, output_splits);
    detail::MpiBlockedSplits send = detail::mpi_blocked_splits(kName, input_splits, max_count_);
    detail::MpiBlockedSplits recv = detail::mpi_blocked_splits(kName, output_splits, max_count_);
    const BlockType send_type(mpi_type(input.dtype()), send.block);
    const BlockType recv_type(mpi_type(output.dtype()), recv.block);

    auto work = std::make_unique<MpiWork>(kName, *this);
    work->keep(input);
    work->keep(output);
    const int* send_counts = work->keep(std::move(send.counts));
    const int* send_displs = work->keep(std::move(send.displs));
    const int* recv_counts = work->keep(std::move(recv.counts));
    const int* recv_displs = work->keep(std::move(recv.displs));
    work->check_posted(MPI_Ialltoallv(input.data_ptr(), send_counts, send_displs, send_type.get(),
                                      output.data_ptr(), recv_counts, recv_displs, recv_type.get(),
                                      comm_, work->add_request()),
                       "MPI_Ialltoallv");
    return Work(std::move(work));
}

Work MpiProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) {
    const char* const kName = "all_reduce";
    check_host(kName, tensor, "tensor");
    const MPI_Datatype type = mpi_reduce_type(kName, tensor.dtype(), op);
    auto work = std::make_unique<MpiWork>(kName, *this);
    work->keep(tensor);
    // Chunks of max_count: a predefined reduction takes only predefined types, so no blocks.
    for (int64_t begin = 0, n = tensor.numel(); begin < n; begin += max_count_) {
        const int count = static_cast<int>(std::min(max_count_, n - begin));
        work->check_posted(MPI_Iallreduce(MPI_IN_PLACE, element_ptr(tensor, begin), count, type,
                                          mpi_op(op), comm_, work->add_request()),
                           "MPI_Iallreduce");
    }
    if (op == ReduceOp::kAvg) {
        work->on_complete([tensor, n = size()] { divide_by(tensor, n); });
    }
    return Work(std::move(work));
}

Work MpiProcessGroup::reduce_scatter_v(const Tensor& input,
                                       const std::vector<int64_t>& input_splits,
                                       Tensor& output,
                                       ReduceOp op) {
    const char* const kName = "reduce_scatter_v";
    check_host(kName, input, "input");
    check_host(kName, output, "output");
    check_reduce_scatter_v(kName, input, input_splits, output);
    const MPI_Datatype type = mpi_reduce_type(kName, input.dtype(), op);
    std::vector<int> counts(input_splits.size());
    for (size_t r = 0; r < input_splits.size(); ++r) {
        SR_CHECK(input_splits[r] <= max_count_,
                 "{}: input_splits[{}] = {} exceeds MPI's int count {} (a reduction cannot use "
                 "blocks); split the tensor",
                 kName, r, input_splits[r], max_count_);
        counts[r] = static_cast<int>(input_splits[r]);
    }
    auto work = std::make_unique<MpiWork>(kName, *this);
    work->keep(input);
    work->keep(output);
    const int* recv_counts = work->keep(std::move(counts));
    work->check_posted(MPI_Ireduce_scatter(input.data_ptr(), output.data_ptr(), recv_counts, type,
                                           mpi_op(op), comm_, work->add_request()),
                       "MPI_Ireduce_scatter");
    if (op == ReduceOp::kAvg) {
        work->on_complete([output, n = size()] { divide_by(output, n); });
    }
    return Work(std::move(work));
}

Work MpiProcessGroup::all_gather_v(const Tensor& input,
                                   Tensor& output,
                                   const std::vector<int64_t>& output_splits) {
    const char* const kName = "all_gather_v";
    check_host(kName, input, "input");
    check_host(kName, output, "output");
    check_all_gather_v(kName, input, output, output_splits);
    detail::MpiBlockedSplits send = detail::mpi_blocked_splits(kName, {input.numel()}, max_count_);
    detail::MpiBlockedSplits recv = detail::mpi_blocked_splits(kName, output_splits, max_count_);
    const BlockType send_type(mpi_type(input.dtype()), send.block);
    const BlockType recv_type(mpi_type(output.dtype()), recv.block);

    auto work = std::make_unique<MpiWork>(kName, *this);
    work->keep(input);
    work->keep(output);
    const int* recv_counts = work->keep(std::move(recv.counts));
    const int* recv_displs = work->keep(std::move(recv.displs));
    work->check_posted(
        MPI_Iallgatherv(input.data_ptr(), send.counts[0], send_type.get(), output.data_ptr(),
                        recv_counts, recv_displs, recv_type.get(), comm_, work->add_request()),
        "MPI_Iallgatherv");
    return Work(std::move(work));
}

Work MpiProcessGroup::broadcast(Tensor& tensor, int root) {
    const char* const kName = "broadcast";
    check_host(kName, tensor, "tensor");
    check_root(kName, root);
    const MPI_Datatype type = mpi_type(tensor.dtype());
    auto work = std::make_unique<MpiWork>(kName, *this);
    work->keep(tensor);
    for (int64_t begin = 0, n = tensor.numel(); begin < n; begin += max_count_) {
        const int count = static_cast<int>(std::min(max_count_, n - begin));
        work->check_posted(
            MPI_Ibcast(element_ptr(tensor, begin), count, type, root, comm_, work->add_request()),
            "MPI_Ibcast");
    }
    return Work(std::move(work));
}

Work MpiProcessGroup::barrier() {
    auto work = std::make_unique<MpiWork>("barrier", *this);
    work->check_posted(MPI_Ibarrier(comm_, work->add_request()), "MPI_Ibarrier");
    return Work(std::move(work));
}

// ---- int counts ----

namespace detail {

MpiBlockedSplits mpi_blocked_splits(const char* collective,
                                    const std::vector<int64_t>& splits,
                                    int64_t max_count) {
    int64_t extent = 0;  // the largest count or displacement
    int64_t divisor = 0;
    int64_t displ = 0;
    for (const int64_t s : splits) {
        extent = std::max({extent, s, displ});
        divisor = std::gcd(divisor, s);
        displ += s;
    }
    MpiBlockedSplits out;
    if (extent > max_count && divisor > 0) {
        out.block = divisor;
        while (out.block > max_count && out.block % 2 == 0) {
            out.block /= 2;
        }
        if (out.block > max_count) {
            out.block = 1;
        }
    }
    SR_CHECK(extent / out.block <= max_count,
             "{}: a count or displacement of {} elements exceeds MPI's int counts (max {}) even in "
             "blocks of {} elements; split the tensor",
             collective, extent, max_count, out.block);
    displ = 0;
    for (const int64_t s : splits) {
        out.counts.push_back(static_cast<int>(s / out.block));
        out.displs.push_back(static_cast<int>(displ / out.block));
        displ += s;
    }
    return out;
}

}  // namespace detail
}  // namespace shardrec::comm
