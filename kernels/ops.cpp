#include "kernels/ops.h"

namespace shardrec::kernels {
static_assert(kNumOps == static_cast<size_t>(OpKind::kCacheRowsUnpack) + 1, "op table out of sync");
}  // namespace shardrec::kernels
