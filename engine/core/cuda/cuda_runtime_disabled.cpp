// The CUDA runtime services in a build without CUDA: no devices, and every use is a clear error.
#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/error.h"

namespace shardrec::cuda {
namespace {

[[noreturn]] void not_built(const char* what) {
    SR_CHECK(false, "{}: shardrec was built without CUDA (configure with -DSHARDREC_CUDA=ON)",
             what);
    throw Error(what);
}

}  // namespace

int device_count() {
    return 0;
}

void* alloc(int, size_t) {
    not_built("cuda::alloc");
}

void free(int, void*) {}

void copy(void*, bool, const void*, bool, size_t) {
    not_built("cuda::copy");
}

void memset_zero(void*, size_t) {
    not_built("cuda::memset_zero");
}

void memset_zero_async(void*, size_t, void*) {
    not_built("cuda::memset_zero_async");
}

void set_device(int) {
    not_built("cuda::set_device");
}

size_t free_bytes(int) {
    not_built("cuda::free_bytes");
}

void copy_async(void*, bool, const void*, bool, size_t, void*) {
    not_built("cuda::copy_async");
}

void copy_2d_async(void*, size_t, bool, const void*, size_t, bool, size_t, size_t, void*) {
    not_built("cuda::copy_2d_async");
}

void* host_alloc_pinned(size_t) {
    not_built("cuda::host_alloc_pinned");
}

void host_free_pinned(void*) {}

void* host_alloc_mapped(size_t, void**) {
    not_built("cuda::host_alloc_mapped");
}

void* stream_create(int) {
    not_built("cuda::stream_create");
}

void stream_destroy(void*) {}

void stream_synchronize(void*) {
    not_built("cuda::stream_synchronize");
}

void* event_create(int, bool) {
    not_built("cuda::event_create");
}

void event_destroy(void*) {}

void event_record(void*, void*) {
    not_built("cuda::event_record");
}

void stream_wait_event(void*, void*) {
    not_built("cuda::stream_wait_event");
}

void event_synchronize(void*) {
    not_built("cuda::event_synchronize");
}

bool event_query(void*) {
    not_built("cuda::event_query");
}

float event_elapsed_ms(void*, void*) {
    not_built("cuda::event_elapsed_ms");
}

}  // namespace shardrec::cuda
