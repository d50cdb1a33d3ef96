#include "engine/modules/module.h"

namespace shardrec {

void append_parameters(std::vector<Parameter*>& out, Module& child) {
    for (Parameter* p : child.parameters())
        out.push_back(p);
}

void move_parameters(Module& m, Device device) {
    for (Parameter* p : m.parameters()) {
        p->value = p->value.to(device);
        p->grad = Tensor::zeros(p->value.shape(), p->value.dtype(), device);
    }
}

}  // namespace shardrec
