#pragma once
// The identity of a file as a load holds it (Note [Data continuity]; the hash: Note [Content
// hash]). Every rank knows every rank's store plans, so every rank knows who holds which unit of
// rows: a unit is hashed by the first store that holds it whole (splits in order, then ranks),
// from that store's tensors; the units no store holds whole are read from the file, an even
// share on each rank; one all-reduce adds the sums.
#include <array>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/DataInfo.h"
#include "data/pipeline/DataIdentity.h"
#include "data/pipeline/StorePlan.h"

namespace mb::dist {
class Communicator;
}

namespace mb::data {

class Layout;

// What the ranks hold after a load.
struct HeldRows {
  const std::array<std::vector<StorePlan>, 3>& plans;  // [split][rank], the same on every rank
  std::array<bool, 3> resident{};  // [split]: its stores hold their rows (a streamed train: no)
  // [split][read]: this rank's tensors, as plans[split][rank].reads (resident splits only).
  const std::array<std::vector<at::Tensor>, 3>* tensors = nullptr;
};

// Collective over `comm`; errors are agreed. The identity of the file at `path`, which `layout`
// reads and `info` splits. Rows no store holds are read from the file in bounded pieces.
DataIdentity identifyContent(const std::string& path, const Layout& layout, const DataInfo& info,
                             const HeldRows& held, dist::Communicator& comm);

}  // namespace mb::data
