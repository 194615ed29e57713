// buildModel: the model zoo by name (ModelRegistry.cpp), initialised identically on every rank.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include "common/Log.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"

namespace mb::model {
namespace {

// Seeds LibTorch's default CPU generator for the lifetime of the guard and restores its
// previous state afterwards, so building a model neither depends on nor disturbs the
// random stream of whatever ran before (LibTorch's initialisers take no generator).
class ScopedSeed {
 public:
  explicit ScopedSeed(std::uint64_t seed) : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    saved_ = generator_.get_state();
    generator_.set_current_seed(seed);
  }
  ~ScopedSeed() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(saved_);
  }
  ScopedSeed(const ScopedSeed&) = delete;
  ScopedSeed& operator=(const ScopedSeed&) = delete;

 private:
  at::Generator generator_;
  at::Tensor saved_;
};

}  // namespace

std::shared_ptr<Model> buildModel(const ModelConfig& config, const data::DataInfo& info,
                                  std::uint64_t seed) {
  std::shared_ptr<Model> model;
  {
    ScopedSeed scoped(seed);
    model = modelKind(config.kind).build(config, info);
  }
  std::int64_t count = 0;
  for (const auto& p : model->parameters())
    count += p.numel();
  log::get("model").info("{}: {} parameters ({:.2f} M)", model->kind(), count,
                         static_cast<double>(count) / 1e6);
  return model;
}

}  // namespace mb::model
