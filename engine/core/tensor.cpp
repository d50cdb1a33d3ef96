#include "engine/core/tensor.h"

#include <algorithm>
#include <cstring>

#include "engine/core/allocator.h"
#include "engine/core/stream.h"

namespace shardrec {

class Storage {
public:
    Storage(Device device, size_t bytes, bool owned, void* data)
        : device_(device), bytes_(bytes), owned_(owned), data_(data) {}

    static std::shared_ptr<Storage> allocate(Device device, size_t bytes) {
        if (device.is_cuda() && host_mapped_allocations()) {
            void* device_ptr = nullptr;
            void* host = mapped_host_alloc(bytes, &device_ptr);
            auto storage = std::make_shared<Storage>(device, bytes, true, device_ptr);
            storage->mapped_host_ = host;
            return storage;
        }
        return std::make_shared<Storage>(device, bytes, true, device_alloc(device, bytes));
    }

    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    ~Storage() {
        if (mapped_host_ != nullptr)
            mapped_host_free(mapped_host_, bytes_);
        else if (owned_)
            device_free(device_, data_, bytes_);
    }

    void* data() const { return data_; }

    size_t bytes() const { return bytes_; }

private:
    Device device_;
    size_t bytes_;
    bool owned_;
    void* data_;
    void* mapped_host_ = nullptr;  // host memory mapped for the device (data_ is its address)

public:
    std::shared_ptr<const void> owner;  // keeps data_ alive (from_blob with an owner)
};

std::string shape_str(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i)
            s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
    for (int64_t d : shape)
        SR_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.device_ = device;
    t.storage_ = Storage::allocate(device, t.nbytes());
    return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
    Tensor t = empty(shape, dtype, device);
    t.zero_();
    return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device) {
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.device_ = device;
    t.storage_ = std::make_shared<Storage>(device, t.nbytes(), false, data);
    return t;
}

Tensor Tensor::from_blob(void* data,
                         const Shape& shape,
                         DType dtype,
                         std::shared_ptr<const void> owner) {
    Tensor t = from_blob(data, shape, dtype, Device::cpu());
    t.storage_->owner = std::move(owner);
    return t;
}

int64_t Tensor::size(int64_t d) const {
    const int64_t n = dim();
    if (d < 0)
        d += n;
    SR_CHECK(d >= 0 && d < n, "dimension {} out of range for tensor {}", d, str());
    return shape_[static_cast<size_t>(d)];
}

void* Tensor::data_ptr() {
    return storage_ ? static_cast<char*>(storage_->data()) + offset_bytes_ : nullptr;
}

const void* Tensor::data_ptr() const {
    return storage_ ? static_cast<const char*>(storage_->data()) + offset_bytes_ : nullptr;
}

Tensor Tensor::view(const Shape& shape) const {
    SR_CHECK(shape_numel(shape) == numel(), "view: cannot view {} as {}", str(), shape_str(shape));
    Tensor t = *this;
    t.shape_ = shape;
    return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
    SR_CHECK(dim() >= 1, "slice: tensor {} has no dimension 0", str());
    SR_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice: [{}, {}) out of range for {}",
             begin, end, str());
    Tensor t = *this;
    const int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
    t.offset_bytes_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
    t.shape_[0] = end - begin;
    return t;
}

Tensor Tensor::clone() const {
    return to(device_);
}

Tensor Tensor::to(Device device) const {
    Tensor t = empty(shape_, dtype_, device);
    t.copy_from(*this);
    return t;
}

void Tensor::copy_from(const Tensor& src) {
    SR_CHECK(src.numel() == numel() && src.dtype() == dtype_, "copy_from: {} into {}", src.str(),
             str());
    device_copy(data_ptr(), device_, src.data_ptr(), src.device_, nbytes());
}

Tensor grow_prefix(Tensor& buffer, int64_t n, DType dtype, Device device) {
    if (!buffer.defined() || buffer.numel() < n || buffer.dtype() != dtype ||
        buffer.device() != device) {
        const int64_t grown = buffer.defined() ? buffer.numel() * 3 / 2 : 0;
        buffer = Tensor::empty({std::max<int64_t>({n + n / 2, grown, 1})}, dtype, device);
    }
    return buffer.slice(0, n);
}

void Tensor::zero_() {
    device_memset_zero(data_ptr(), device_, nbytes());
}

void Tensor::zero_(Stream& stream) {
    memset_zero_async(data_ptr(), device_, nbytes(), stream);
}

std::string Tensor::str() const {
    return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device_.str();
}

void Tensor::check_type(DType want) const {
    SR_CHECK(want == dtype_, "tensor {} accessed as {}", str(), dtype_name(want));
}

}  // namespace shardrec
