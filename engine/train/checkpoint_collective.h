// The collectives of checkpoint save and load (pg nullptr: one process, no communication).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace shardrec::train {

// Every rank's string, in rank order, on every rank.
std::vector<std::string> gather_strings(comm::ProcessGroup* pg, const std::string& s);

// Runs f on this rank, then every rank learns whether any rank failed and all throw the first
// failing rank's message (after on_error), so no rank is left waiting in a collective.
void together(comm::ProcessGroup* pg,
              const std::function<void()>& f,
              const std::function<void()>& on_error = {});

}  // namespace shardrec::train
