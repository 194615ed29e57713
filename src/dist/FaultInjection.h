#pragma once
// Test-only fault hooks, driven by environment variables so tests can attack a real run:
//   MEGABATCH_FAULT_HANG=RANK:LABEL[:SKIP]
//     rank RANK sleeps forever inside the (SKIP+1)-th collective whose label contains LABEL,
//     e.g. "1:grad bucket:3". The watchdog must end the job.
// Nothing here is active unless the variable is set.
#include <string>

namespace mb::dist {

// Called by backends at the start of every collective.
void maybeInjectHang(int rank, const std::string& label);

}  // namespace mb::dist
