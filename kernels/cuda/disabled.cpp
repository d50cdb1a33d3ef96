// Compiled when a cuda:: kernel entry has no CUDA definition in this build: every entry throws
// "built without CUDA". Forgetting an entry is a link error in the CPU-only build, which CI runs.
#include "engine/core/error.h"

namespace shardrec::kernels::cuda {
namespace {

[[noreturn, maybe_unused]] void throw_not_built(const char* what) {
    SR_CHECK(false, "{}: no CUDA definition in this build", what);
    throw Error(what);
}

}  // namespace

// One definition per cuda:: entry declared in kernels/*.h, in op order (kernels/ops.h).

}  // namespace shardrec::kernels::cuda
