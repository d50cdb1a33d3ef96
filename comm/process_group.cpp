// The Work handle and the backend-independent group helpers.
#include "comm/process_group.h"

#include <exception>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::comm {

// A destructor must not throw: a failed collective here is logged on this rank (a test fails on
// it; tools/main.cpp is not reached, but the peers' own waits time out and report).
namespace {

// A collective dropped without wait() still completes before its handle goes; a failure is
// logged, never thrown (destructors and move-assignment are noexcept).
void finish_dropped(std::unique_ptr<WorkImpl>& impl) {
    if (!impl) {
        return;
    }
    try {
        impl->wait();
    } catch (const std::exception& e) {
        log::all().error("a Work destroyed without wait() failed: {}", e.what());
    }
    impl.reset();
}

}  // namespace

Work::~Work() {
    finish_dropped(impl_);
}

Work& Work::operator=(Work&& other) noexcept {
    if (this != &other) {
        finish_dropped(impl_);
        impl_ = std::move(other.impl_);
    }
    return *this;
}

// The impl goes away even when wait() throws: the error is reported once, by this call, and
// neither a second wait() nor the destructor raises it again.
void Work::wait() {
    if (!impl_) {
        return;
    }
    const std::unique_ptr<WorkImpl> impl = std::move(impl_);
    impl->wait();
}

bool Work::is_completed() {
    return !impl_ || impl_->is_completed();
}

// TorchRec intra_and_cross_node_pg: nodes are consecutive blocks of local_size ranks.
IntraAndCrossNodeGroups intra_and_cross_node_pg(ProcessGroup& world, int local_size) {
    SR_CHECK(local_size > 0 && world.size() % local_size == 0,
             "intra_and_cross_node_pg: local size {} does not divide the group size {}", local_size,
             world.size());
    const int rank = world.rank();
    IntraAndCrossNodeGroups groups;
    // Both splits are collective over world, in this order on every rank.
    groups.intra = world.split(rank / local_size, rank, "intra_node");
    groups.cross = world.split(rank % local_size, rank, "cross_node");
    return groups;
}

}  // namespace shardrec::comm
