#include "engine/core/device.h"

#include "engine/core/error.h"

namespace shardrec {

Device Device::parse(const std::string& text) {
    if (text == "cpu")
        return cpu();
    if (text == "cuda")
        return cuda(0);
    if (text.rfind("cuda:", 0) == 0) {
        const std::string idx = text.substr(5);
        SR_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
                 "bad device '{}' (expected cpu, cuda or cuda:N)", text);
        return cuda(std::stoi(idx));
    }
    SR_CHECK(false, "bad device '{}' (expected cpu, cuda or cuda:N)", text);
    return cpu();
}

}  // namespace shardrec
