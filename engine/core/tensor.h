// Tensor: a contiguous, row-major block of one dtype on one device. It owns its buffer (shared
// between copies of the handle) or views part of another tensor's buffer. Copying a Tensor copies
// the handle, never the data; clone() copies the data.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace shardrec {

class Stream;
class Tensor;

// A prefix view [n] of a 1-D buffer of `dtype` on `device` that only grows (with half again as
// much headroom, so varying batch sizes settle quickly): per-batch buffers kept this way allocate
// nothing once their sizes have been seen.
Tensor grow_prefix(Tensor& buffer, int64_t n, DType dtype, Device device = Device::cpu());

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Storage;

class Tensor {
public:
    Tensor() = default;  // undefined: defined() is false

    static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
    static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
    // Wraps caller memory without owning it (the caller keeps it alive).
    static Tensor from_blob(void* data,
                            const Shape& shape,
                            DType dtype,
                            Device device = Device::cpu());
    // Wraps host memory that `owner` keeps alive (a file mapping, say): the tensor and its views
    // hold `owner` until the last of them is gone.
    static Tensor from_blob(void* data,
                            const Shape& shape,
                            DType dtype,
                            std::shared_ptr<const void> owner);

    template <typename T>
    static Tensor from_vector(const std::vector<T>& v, Shape shape = {}) {
        if (shape.empty())
            shape = {static_cast<int64_t>(v.size())};
        SR_CHECK(shape_numel(shape) == static_cast<int64_t>(v.size()),
                 "from_vector: {} values do not fill shape {}", v.size(), shape_str(shape));
        Tensor t = empty(shape, dtype_of<T>());
        if (!v.empty())
            std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
        return t;
    }

    bool defined() const { return storage_ != nullptr; }

    // Another tensor (a view or a copy) holds this one's storage: a pooled buffer is free to reuse
    // only when none does.
    bool shares_storage() const { return storage_.use_count() > 1; }

    // Identifies the storage without keeping it alive: expired once the last tensor on it is gone
    // (a cache keyed by data_ptr() tells a freed and reallocated buffer from the one it saw).
    std::weak_ptr<const void> storage_token() const { return storage_; }

    const Shape& shape() const { return shape_; }

    int64_t dim() const { return static_cast<int64_t>(shape_.size()); }

    int64_t size(int64_t d) const;  // negative d counts from the end

    int64_t numel() const { return shape_numel(shape_); }

    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

    DType dtype() const { return dtype_; }

    Device device() const { return device_; }

    void* data_ptr();
    const void* data_ptr() const;

    // Typed access; checks that T matches the dtype.
    template <typename T>
    T* data() {
        check_type(dtype_of<T>());
        return static_cast<T*>(data_ptr());
    }

    template <typename T>
    const T* data() const {
        check_type(dtype_of<T>());
        return static_cast<const T*>(data_ptr());
    }

    // A view with another shape of the same numel.
    Tensor view(const Shape& shape) const;
    // Rows [begin, end) along dim 0, as a view.
    Tensor slice(int64_t begin, int64_t end) const;

    Tensor clone() const;
    Tensor to(Device device) const;
    void copy_from(const Tensor& src);  // same numel and dtype; any devices
    void zero_();
    void zero_(Stream& stream);  // in `stream`'s order (a CUDA tensor's users run on streams)

    template <typename T>
    std::vector<T> to_vector() const {
        Tensor host = device_.is_cpu() ? *this : to(Device::cpu());
        const T* p = host.data<T>();
        return std::vector<T>(p, p + numel());
    }

    std::string str() const;  // "f32[4, 8] on cpu"

private:
    void check_type(DType want) const;

    std::shared_ptr<Storage> storage_;
    size_t offset_bytes_ = 0;
    Shape shape_;
    DType dtype_ = DType::kF32;
    Device device_;
};

}  // namespace shardrec
