#pragma once
// Note [oneDNN bf16 LSTM]: Debian 13's CUDA LibTorch 2.6 is built with oneDNN and
// sends a bf16 LSTM on the CPU to oneDNN whenever the CPU reports AVX-512; on CPUs without
// oneDNN's bf16 RNN kernels the call then fails ("could not create a primitive descriptor for
// the LSTM forward propagation primitive"; found by unit.Lstm in the CUDA build stage, on the
// CI machine). LibTorch's own LSTM handles bf16 on every CPU: this guard turns oneDNN off for
// one call where `active` (a CPU LSTM in bf16 or under CPU autocast), and back on after. It is
// a LibTorch build difference rather than a version one, so it lives beside TorchCompat.h.
// LibTorch 1.13 has no oneDNN RNN (mkldnn_rnn_layer came with 2.0), so there the guard does
// nothing. It used to act there too, and that cost 17x: under CPU autocast the LSTM's matrix
// products run in bf16, and with oneDNN off they went to LibTorch's reference bf16 kernels
// instead of oneDNN's (measured on an avx512_bf16 EPYC, `megabatch eval --precision bf16` of
// configs/lstm-multitf.yaml's model: 3.24 samples/s with oneDNN off, 138 with it on, 81.5 in
// fp32; docs/operations.md "Precision on the CPU").
//
// Note [oneDNN LSTM inference]
// The same LibTorch 2.6 gets fp32 LSTM outputs wrong outside grad mode for many hidden sizes on
// this project's AVX-512 EPYC: hidden 4, 8, 12, 16 and 48 are off by 0.03 to 0.9, while 20, 24,
// 32, 64 and 128 are right, whatever the batch or the features. In grad mode (oneDNN's
// training primitive) every size is right, and so is LibTorch's own LSTM; outside it oneDNN's
// inference primitive runs (found by unit.Lstm's LstmRecompute, whose recomputed segments run
// their first pass without grad mode). oneDNN's inference is 3x faster than LibTorch's own LSTM
// where it is right (hidden 128: 0.2 s against 0.7 s a forward), so rather than turning it off
// for every LSTM, the model probes each of its LSTMs once, on a small random input with its own
// weights, and sends only those whose probe disagrees to LibTorch's own (model/kinds/Lstm.cpp,
// with a warning). Evaluation, prediction and recomputation run outside grad mode.
#include <ATen/Context.h>

#include "common/TorchCompat.h"

namespace mb::compat {

// Whether this LibTorch can send a CPU LSTM to oneDNN at all.
constexpr bool kOneDnnRnn = MB_TORCH_VERSION_AT_LEAST(2, 0);

class NativeCpuRnnGuard {
 public:
  explicit NativeCpuRnnGuard(bool active)
      : active_(kOneDnnRnn && active && at::globalContext().userEnabledMkldnn()) {
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
