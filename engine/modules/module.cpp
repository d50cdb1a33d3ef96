#include "engine/modules/module.h"

namespace shardrec {

void append_parameters(std::vector<Parameter*>& out, Module& child) {
    for (Parameter* p : child.parameters())
        out.push_back(p);
}

}  // namespace shardrec
