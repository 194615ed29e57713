#pragma once
// World of one: every collective is the identity. Needs no MPI, so `megabatch train` runs as a
// plain process on a laptop or a single GPU.
#include "dist/Communicator.h"

namespace mb::dist {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backendName() const override { return "single"; }
  std::shared_ptr<Work> allReduceAsync(at::Tensor tensor, ReduceOp op,
                                       const std::string& label) override;
  void broadcast(at::Tensor tensor, int root, const std::string& label) override;
  at::Tensor allGather(const at::Tensor& tensor, const std::string& label) override;
  void barrier(const std::string& label) override {}
};

}  // namespace mb::dist
