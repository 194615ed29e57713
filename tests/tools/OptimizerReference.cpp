// Writes an HDF5 file for tests/train/test_optimizer_parity.py: initial parameters, the
// gradients of every step, and the parameters megabatch's optimizers produce, so PyTorch's
// torch.optim can replay the same steps and compare. The parameters and gradients live on
// test::device() (MEGABATCH_TEST_DEVICE), so under cuda torch.optim on the CPU checks the CUDA
// optimizer.
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/Functions.h>

#include "common/Hdf5.h"
#include "config/Config.h"
#include "tests/support/Device.h"
#include "train/loop/Optimizer.h"

namespace {

using mb::h5::Handle;
constexpr mb::ExitCode kCode = mb::ExitCode::kFailure;
constexpr int kSteps = 6;

struct Case {
  std::string name;
  mb::OptimConfig config;
};

std::vector<Case> cases() {
  mb::OptimConfig adamw;
  adamw.name = mb::OptimizerKind::kAdamW;
  adamw.lr = 0.01;
  adamw.weightDecay = 0.1;
  adamw.warmupSteps = 2;
  adamw.schedule = mb::ScheduleKind::kCosine;
  mb::OptimConfig adam = adamw;
  adam.name = mb::OptimizerKind::kAdam;
  adam.schedule = mb::ScheduleKind::kLinear;
  adam.beta1 = 0.8;
  adam.beta2 = 0.95;
  adam.eps = 1e-6;
  mb::OptimConfig sgd = adamw;
  sgd.name = mb::OptimizerKind::kSgd;
  sgd.weightDecay = 0.01;
  sgd.momentum = 0.9;
  sgd.schedule = mb::ScheduleKind::kConstant;
  sgd.warmupSteps = 0;
  mb::OptimConfig nesterov = sgd;
  nesterov.nesterov = true;
  return {{"adamw", adamw}, {"adam", adam}, {"sgd", sgd}, {"sgd_nesterov", nesterov}};
}

void writeConfig(hid_t group, const mb::OptimConfig& c) {
  mb::h5::writeAttribute(group, "lr", c.lr, kCode);
  mb::h5::writeAttribute(group, "weight_decay", c.weightDecay, kCode);
  mb::h5::writeAttribute(group, "beta1", c.beta1, kCode);
  mb::h5::writeAttribute(group, "beta2", c.beta2, kCode);
  mb::h5::writeAttribute(group, "eps", c.eps, kCode);
  mb::h5::writeAttribute(group, "momentum", c.momentum, kCode);
  mb::h5::writeAttribute(group, "nesterov", static_cast<std::int64_t>(c.nesterov), kCode);
  mb::h5::writeAttribute(group, "warmup_steps", c.warmupSteps, kCode);
  mb::h5::writeAttribute(group, "min_lr_ratio", c.minLrRatio, kCode);
}

void writeCase(hid_t file, const Case& c, bool masked, const std::vector<double>& lrs,
               const at::Tensor& matrix, const at::Tensor& bias, std::int64_t stepCount) {
  mb::h5::WriteOptions plain;
  Handle group = mb::h5::createGroup(file, c.name + (masked ? "_masked" : ""), kCode);
  writeConfig(group.get(), c.config);
  mb::h5::writeAttribute(group.get(), "schedule",
                         std::string(c.config.schedule == mb::ScheduleKind::kCosine   ? "cosine"
                                     : c.config.schedule == mb::ScheduleKind::kLinear ? "linear"
                                                                                      : "constant"),
                         kCode);
  mb::h5::writeAttribute(group.get(), "step_count", stepCount, kCode);
  mb::h5::writeTensor(group.get(), "lrs", at::tensor(lrs, at::kDouble), plain, kCode);
  mb::h5::writeTensor(group.get(), "matrix", matrix.detach(), plain, kCode);
  mb::h5::writeTensor(group.get(), "bias", bias.detach(), plain, kCode);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.h5\n", argv[0]);
    return 2;
  }
  c10::Device device(c10::kCPU);
  try {
    device = mb::test::device();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf("optimizers on %s\n", device.str().c_str());
  at::manual_seed(0);
  at::Tensor initialMatrix = at::randn({4, 3}, at::kDouble).to(at::kFloat);
  at::Tensor initialBias = at::randn({3}, at::kDouble).to(at::kFloat);
  std::vector<std::pair<at::Tensor, at::Tensor>> grads;
  for (int s = 0; s < kSteps; ++s)
    grads.emplace_back(at::randn({4, 3}), at::randn({3}));

  Handle file = mb::h5::createFile(argv[1], false, kCode);
  mb::h5::writeAttribute(file.get(), "device", device.str(), kCode);
  mb::h5::WriteOptions plain;
  mb::h5::writeTensor(file.get(), "initial_matrix", initialMatrix, plain, kCode);
  mb::h5::writeTensor(file.get(), "initial_bias", initialBias, plain, kCode);
  for (int s = 0; s < kSteps; ++s) {
    mb::h5::writeTensor(file.get(), "grad_matrix_" + std::to_string(s), grads[s].first, plain,
                        kCode);
    mb::h5::writeTensor(file.get(), "grad_bias_" + std::to_string(s), grads[s].second, plain,
                        kCode);
  }
  for (const auto& c : cases()) {
    for (bool masked : {false, true}) {
      at::Tensor matrix = initialMatrix.clone().to(device).requires_grad_(true);
      at::Tensor bias = initialBias.clone().to(device).requires_grad_(true);
      mb::train::Optimizer optimizer(c.config, {{"matrix", matrix}, {"bias", bias}});
      const auto flag = at::TensorOptions().dtype(at::kDouble).device(device);
      std::vector<double> lrs;
      for (int s = 0; s < kSteps; ++s) {
        if (masked && (s == 0 || s == 3)) {
          // A skipped step (apply = 0) with other gradients and another lr, before the first
          // update and in the middle: it must change nothing, the step count included.
          matrix.mutable_grad() = at::randn({4, 3}).mul_(100).to(device);
          bias.mutable_grad() = at::randn({3}).mul_(100).to(device);
          optimizer.step(0.5, at::zeros({}, flag));
        }
        matrix.mutable_grad() = grads[s].first.clone().to(device);
        bias.mutable_grad() = grads[s].second.clone().to(device);
        lrs.push_back(mb::train::learningRate(c.config, s, kSteps));
        if (masked) {
          optimizer.step(lrs.back(), at::ones({}, flag));
        } else {
          optimizer.step(lrs.back());
        }
      }
      writeCase(file.get(), c, masked, lrs, matrix, bias, optimizer.stepCount());
    }
  }
  return 0;
}
