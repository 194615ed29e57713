#include "train/watch/LogWindow.h"

#include <cmath>
#include <string>

#include <ATen/Functions.h>

#include "dist/Communicator.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace {

constexpr const char* kStepsName = "steps";
constexpr const char* kLossSumsName = "loss_sums";

const at::Tensor* findStored(const NamedTensors& stored, const char* name) {
  for (const auto& [key, tensor] : stored)
    if (key == name) return &tensor;
  return nullptr;
}

// Rank 0: [carried steps, then each current rank's loss sum] from what the checkpoint kept, or
// all zeros when it kept nothing usable (Note [Log windows across a resume]).
at::Tensor carriedShares(const NamedTensors& stored, std::int64_t storedWorld, std::int64_t world) {
  at::Tensor shares = at::zeros({world + 1}, at::kDouble);
  const at::Tensor* steps = findStored(stored, kStepsName);
  const at::Tensor* sums = findStored(stored, kLossSumsName);
  if (steps == nullptr || sums == nullptr) return shares;  // an older checkpoint
  const bool wellFormed = steps->numel() == 1 && sums->dim() == 1 && sums->numel() == storedWorld;
  const at::Tensor values = wellFormed ? sums->to(at::kDouble) : at::Tensor();
  const std::int64_t count = wellFormed ? steps->to(at::kLong).item<std::int64_t>() : -1;
  if (!wellFormed || count < 0 || !at::isfinite(values).all().item<bool>()) {
    trainLog().warn(
        "the checkpoint's /log_window is malformed (steps: {} value(s), loss_sums: {} value(s) "
        "for {} ranks): the first record after this resume averages only the steps this run "
        "takes",
        steps->numel(), sums->numel(), storedWorld);
    return shares;
  }
  shares[0] = static_cast<double>(count);
  if (count == 0) return shares;
  if (storedWorld == world)
    shares.narrow(0, 1, world).copy_(values);  // each rank's own float, bit for bit
  else
    shares[1] = values.sum();  // another rank count: rank 0 carries the total
  return shares;
}

}  // namespace

void LogWindow::add(const at::Tensor& loss, std::int64_t stepSamples) {
  steps += 1;
  samples += stepSamples;
  lossSum = lossSum.defined() ? lossSum + loss : loss.clone();
}

NamedTensors gatherLogWindow(const LogWindow& window, dist::Communicator& control) {
  const std::int64_t count = window.lossSteps();
  at::Tensor own = window.lossSum.defined() && count > 0
                       ? window.lossSum.to(at::kCPU, at::kFloat).reshape({1})
                       : at::zeros({1}, at::kFloat);
  at::Tensor sums = control.allGather(own, "log window").reshape({-1});
  return {{kStepsName, at::full({1}, count, at::kLong)}, {kLossSumsName, sums}};
}

void restoreLogWindow(LogWindow& window, const NamedTensors& stored, std::int64_t storedWorld,
                      dist::Communicator& control, c10::Device device) {
  const std::int64_t world = control.size();
  at::Tensor shares = control.rank() == 0 ? carriedShares(stored, storedWorld, world)
                                          : at::zeros({world + 1}, at::kDouble);
  control.broadcast(shares, 0, "log window");
  window.carriedSteps = std::llround(shares[0].item<double>());
  if (window.carriedSteps == 0) return;
  const double own = shares[1 + control.rank()].item<double>();
  window.lossSum = at::full({}, own, at::TensorOptions().dtype(at::kFloat).device(device));
  if (control.rank() == 0)
    trainLog().info(
        "the checkpoint was written {} step(s) into a log window: the next record averages them "
        "with this run's steps",
        window.carriedSteps);
}

}  // namespace mb::train
