// Where a tensor lives: the host, or one CUDA device.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
    DeviceType type = DeviceType::kCpu;
    int index = 0;

    static Device cpu() { return Device{DeviceType::kCpu, 0}; }

    static Device cuda(int index) { return Device{DeviceType::kCuda, index}; }

    bool is_cpu() const { return type == DeviceType::kCpu; }

    bool is_cuda() const { return type == DeviceType::kCuda; }

    std::string str() const {
        return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
    }

    // "cpu", "cuda", "cuda:N"; throws on anything else.
    static Device parse(const std::string& text);

    bool operator==(const Device& o) const { return type == o.type && index == o.index; }

    bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace shardrec
