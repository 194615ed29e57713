#pragma once
// Note [oneDNN bf16 LSTM] (issue 26): Debian 13's CUDA LibTorch 2.6 is built with oneDNN and
// sends a bf16 LSTM on the CPU to oneDNN whenever the CPU reports AVX-512; on CPUs without
// oneDNN's bf16 RNN kernels the call then fails ("could not create a primitive descriptor for
// the LSTM forward propagation primitive"; found by unit.Lstm in the CUDA build stage, on the
// CI machine). LibTorch's own LSTM handles bf16 on every CPU: this guard turns oneDNN off for
// one call where `active` (a CPU LSTM in bf16 or under CPU autocast), and back on after. It is
// a LibTorch build difference rather than a version one, so it lives beside TorchCompat.h.
#include <ATen/Context.h>

namespace mb::compat {

class NativeCpuRnnGuard {
 public:
  explicit NativeCpuRnnGuard(bool active)
      : active_(active && at::globalContext().userEnabledMkldnn()) {
    if (active_) at::globalContext().setUserEnabledMkldnn(false);
  }
  ~NativeCpuRnnGuard() {
    if (active_) at::globalContext().setUserEnabledMkldnn(true);
  }
  NativeCpuRnnGuard(const NativeCpuRnnGuard&) = delete;
  NativeCpuRnnGuard& operator=(const NativeCpuRnnGuard&) = delete;

 private:
  bool active_;
};

}  // namespace mb::compat
