// Note [CPU auto precision]: the rule auto decides by, the record a checkpoint keeps and what a
// resume does with it, and the precision eval runs a bf16 checkpoint in. The end-to-end runs
// (MEGABATCH_FAULT_CPU_FLAGS, MEGABATCH_FAULT_CPU_BF16_RATIO) are in
// tests/train/test_precision_fit.py.
#include <string>

#include <gtest/gtest.h>

#include "train/precision/CpuAutoPrecision.h"

namespace mb::train {
namespace {

CpuAutoEvidence withUnits(double probeRatio) {
  CpuAutoEvidence evidence;
  evidence.probe.hasUnits = cpuHasUnitsFor(DType::kBf16, "avx2 avx512_bf16", &evidence.probe.flags);
  evidence.probe.fp32Ms = 1.0;
  evidence.probe.reducedMs = probeRatio;
  return evidence;
}

CpuTrialTimes trialOf(double fp32Ms, double bf16Ms) {
  CpuTrialTimes times;
  times.fp32Ms = fp32Ms;
  times.bf16Ms = bf16Ms;
  times.repeats = 3;
  times.items = 64;
  times.seconds = 0.8;
  return times;
}

TEST(CpuAutoPrecision, WithoutUnitsItIsFp32AndSaysWhy) {
  CpuAutoEvidence evidence;
  evidence.probe.hasUnits = cpuHasUnitsFor(DType::kBf16, "avx2 fma", &evidence.probe.flags);
  const PrecisionChoice choice = decideCpuAuto(evidence);
  EXPECT_EQ(choice.dtype, DType::kFp32);
  EXPECT_EQ(choice.reason,
            "train.precision = auto: fp32, this CPU has no bf16 units (no avx512_bf16 or amx_bf16 "
            "among its flags)");
}

TEST(CpuAutoPrecision, ASlowProbeIsFp32WithoutATrial) {
  const PrecisionChoice choice = decideCpuAuto(withUnits(0.9));
  EXPECT_EQ(choice.dtype, DType::kFp32);
  EXPECT_NE(choice.reason.find("the probe's product at the model's width took 0.90x of fp32's "
                               "time in bf16"),
            std::string::npos)
      << choice.reason;
  EXPECT_NE(choice.reason.find("at most 0.83x"), std::string::npos) << choice.reason;
}

TEST(CpuAutoPrecision, AFastProbeAloneIsNotEnough) {
  CpuAutoEvidence evidence = withUnits(0.3);
  evidence.notTried = "the model carries state from step to step, which a trial step would move";
  const PrecisionChoice choice = decideCpuAuto(evidence);
  EXPECT_EQ(choice.dtype, DType::kFp32);
  EXPECT_NE(choice.reason.find("no trial step ran (the model carries state"), std::string::npos)
      << choice.reason;
}

TEST(CpuAutoPrecision, TheTrialStepDecides) {
  // The demo LSTM's case: the probe says 0.55x, the model's own step is slower in bf16.
  CpuAutoEvidence slow = withUnits(0.55);
  slow.trial = trialOf(121.5, 157.3);
  PrecisionChoice choice = decideCpuAuto(slow);
  EXPECT_EQ(choice.dtype, DType::kFp32);
  EXPECT_NE(choice.reason.find("a trial step of 64 samples took 1.29x of fp32's time in bf16 "
                               "(157.3 ms against 121.5 ms, median of 3"),
            std::string::npos)
      << choice.reason;
  // Just past the bound is still fp32; at the bound, bf16.
  CpuAutoEvidence edge = withUnits(0.5);
  edge.trial = trialOf(100, 84);
  EXPECT_EQ(decideCpuAuto(edge).dtype, DType::kFp32);
  edge.trial = trialOf(120, 100);
  EXPECT_EQ(decideCpuAuto(edge).dtype, DType::kBf16);
  // arith-gpt's case.
  CpuAutoEvidence fast = withUnits(0.33);
  fast.trial = trialOf(358.0, 149.4);
  choice = decideCpuAuto(fast);
  EXPECT_EQ(choice.dtype, DType::kBf16);
  EXPECT_EQ(choice.reason.rfind("train.precision = auto: bf16 (CPU autocast, fp32 master weights): "
                                "this CPU has bf16 units (avx512_bf16), and a trial step of 64 "
                                "samples took 0.42x",
                                0),
            0u)
      << choice.reason;
  EXPECT_NE(choice.reason.find("train.precision=fp32 keeps fp32"), std::string::npos);
}

TEST(CpuAutoPrecision, AResumeOnTheSameCpuKeepsTheRecordWithoutMeasuring) {
  TrainerState state;
  state.trainedPrecision = precisionCode(DType::kBf16);
  state.autoPrecisionCpu = cpuIdentity();
  state.autoPrecisionTrialRatio = 0.42;
  CpuAutoInputs inputs;
  inputs.width = 64;
  bool tried = false;
  inputs.trial = [&] {
    tried = true;
    return trialOf(1, 1);
  };
  const PrecisionChoice choice = chooseCpuAuto(state, inputs);
  EXPECT_FALSE(tried);
  EXPECT_EQ(choice.dtype, DType::kBf16);
  EXPECT_NE(choice.reason.find("as this run chose on this CPU at its start (trial step in bf16: "
                               "0.42x of fp32's time)"),
            std::string::npos)
      << choice.reason;
  EXPECT_EQ(state.trainedPrecision, precisionCode(DType::kBf16));
}

TEST(CpuAutoPrecision, AResumeOnAnotherCpuMeasuresAgainAndSaysSo) {
  TrainerState state;
  state.trainedPrecision = precisionCode(DType::kBf16);
  state.autoPrecisionCpu = cpuIdentity() + 1;  // another CPU
  CpuAutoInputs inputs;
  inputs.width = 64;
  inputs.trial = [] { return trialOf(100, 200); };  // slower in bf16, wherever it runs
  const PrecisionChoice choice = chooseCpuAuto(state, inputs);
  EXPECT_EQ(choice.dtype, DType::kFp32);  // no units, a slow probe or a slow trial: fp32 all
  EXPECT_NE(choice.reason.find("the checkpoint's run had chosen bf16 on another CPU"),
            std::string::npos)
      << choice.reason;
  EXPECT_EQ(state.trainedPrecision, precisionCode(DType::kFp32));
  EXPECT_EQ(state.autoPrecisionCpu, cpuIdentity());
}

TEST(CpuAutoPrecision, CodesRoundTripAndZeroIsNotRecorded) {
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16})
    EXPECT_EQ(precisionFromCode(precisionCode(dtype)), dtype);
  EXPECT_FALSE(precisionFromCode(0).has_value());
  EXPECT_NE(cpuIdentity(), 0);
  EXPECT_EQ(cpuIdentity(), cpuIdentity());
}

TEST(CpuAutoPrecision, EvalKeepsFp32ForWhatDidNotTrainInBf16) {
  std::string whyNot;
  TrainerState fp32Run;
  fp32Run.trainedPrecision = precisionCode(DType::kFp32);
  EXPECT_FALSE(cpuInferenceInBf16(fp32Run, Precision::kAuto, 64, whyNot).has_value());
  TrainerState older;  // a checkpoint without the record: its config says
  EXPECT_FALSE(cpuInferenceInBf16(older, Precision::kFp32, 64, whyNot).has_value());
  EXPECT_FALSE(cpuInferenceInBf16(older, Precision::kAuto, 64, whyNot).has_value());
}

TEST(CpuAutoPrecision, EvalRunsInBf16WhereAutoChoseItOnThisCpu) {
  TrainerState state;
  state.trainedPrecision = precisionCode(DType::kBf16);
  state.autoPrecisionCpu = cpuIdentity();
  state.autoPrecisionTrialRatio = 0.45;
  std::string whyNot;
  const std::optional<PrecisionChoice> choice =
      cpuInferenceInBf16(state, Precision::kAuto, 64, whyNot);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->dtype, DType::kBf16);
  EXPECT_NE(choice->reason.find("train.precision = auto chose it on this CPU"), std::string::npos);
  EXPECT_NE(choice->reason.find("--precision fp32 for fp32"), std::string::npos);
}

}  // namespace
}  // namespace mb::train
