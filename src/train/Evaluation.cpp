#include "train/Evaluation.h"

#include <algorithm>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "common/CpuAllocationScope.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/HostAllocator.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "data/ShardedData.h"
#include "dist/Communicator.h"
#include "dist/FaultInjection.h"
#include "dist/Watchdog.h"
#include "model/Generate.h"
#include "model/Model.h"
#include "train/Signals.h"
#include "train/judge/Forecasts.h"
#include "train/memory/EvalBatch.h"
#include "train/memory/MemoryPlan.h"
#include "train/memory/MicroBatchSearch.h"
#include "train/precision/Precision.h"

namespace mb::train {
namespace {

std::string nameOf(data::Split split, const EvalOptions& options) {
  return options.name.empty() ? std::string(data::toString(split)) : options.name;
}

// Every rank's split rows (model::SplitMetrics::splitRows), in rank order: [sum of counts, width]
// fp64 on the CPU, the same on every rank. Ranks hold different counts, so each pads to the
// largest.
at::Tensor gatherSplitRows(dist::Communicator& control, const std::vector<at::Tensor>& parts,
                           std::int64_t width) {
  at::Tensor mine = parts.empty() ? at::zeros({0, width}, at::kDouble) : at::cat(parts);
  at::Tensor counts = control.allGather(at::full({1}, mine.size(0), at::kLong), "eval row counts");
  const std::int64_t largest = counts.max().item<std::int64_t>();
  at::Tensor padded = at::zeros({largest, width}, at::kDouble);
  padded.narrow(0, 0, mine.size(0)).copy_(mine);
  at::Tensor all = control.allGather(padded, "eval rows");  // [W, largest, width]
  std::vector<at::Tensor> rows;
  for (std::int64_t r = 0; r < all.size(0); ++r)
    rows.push_back(all[r].narrow(0, 0, counts[r][0].item<std::int64_t>()));
  return at::cat(rows);
}

// The rank with the most samples (the first of them) finishes last: it speaks for the
// evaluation (Note [Work progress]). Collective.
struct Speaker {
  int rank = 0;
  std::int64_t total = 0;  // samples over every rank
};
Speaker findSpeaker(dist::Communicator& control, std::int64_t count) {
  at::Tensor counts = control.allGather(at::full({1}, count, at::kLong), "eval sample counts");
  Speaker speaker;
  speaker.rank = static_cast<int>(counts.reshape({-1}).argmax().item<std::int64_t>());
  speaker.total = counts.sum().item<std::int64_t>();
  return speaker;
}

// What one batch adds to the sums.
struct BatchSums {
  at::Tensor loss;
  model::NamedTensors metrics;
  at::Tensor rows;       // [B, rowWidth] fp64 on the CPU, or undefined
  at::Tensor forecasts;  // Note [Forecast metrics]: [M, kForecastWidth] fp64 on the CPU
};

// One batch's sums, and its peak bytes (-1 when not counted) in `peak`.
BatchSums evaluateBatch(model::Model& model, const data::Batch& batch, const c10::Device& device,
                        const EvalOptions& options, model::SplitMetrics* splitMetrics,
                        ForecastKind forecasts, std::int64_t& peak) {
  std::optional<CpuAllocationScope> cap;  // Note [Evaluation batch]
  const bool counted = options.roomBytes > 0;
  std::int64_t start = 0;
  if (counted && !device.is_cuda()) cap.emplace(options.roomBytes);
  if (counted && device.is_cuda()) {
    resetDevicePeak(device);
    start = deviceAllocatedBytes(device);
  }
  BatchSums sums;
  {
    AutocastScope autocast(device.type(), options.precision);
    at::Tensor output = model.forward(batch);
    sums.loss = model.lossSum(output, batch);
    sums.metrics = model.metricSums(output, batch);
    if (splitMetrics != nullptr)
      sums.rows = splitMetrics->splitRows(output, batch).to(at::kCPU, at::kDouble);
    if (forecasts != ForecastKind::kNone) sums.forecasts = forecastRows(forecasts, output, batch);
  }
  peak = !counted ? -1 : cap ? cap->peakBytes() : devicePeakBytes(device) - start;
  return sums;
}

}  // namespace

std::map<std::string, double> evaluateSplit(model::Model& model, data::ShardedData& data,
                                            data::Split split, dist::Communicator& control,
                                            c10::Device device, EvalOptions& options) {
  const bool wasTraining = model.is_training();
  model.eval();
  at::NoGradGuard noGrad;
  std::vector<std::string> names = model.metricNames();
  std::int64_t count = data.evalCount(split);
  if (options.maxSamplesPerRank > 0) count = std::min(count, options.maxSamplesPerRank);
  // [count, loss, metrics...]: summed on the device, copied and reduced once.
  at::Tensor sums = at::zeros({static_cast<std::int64_t>(names.size()) + 2},
                              at::TensorOptions().device(device).dtype(at::kDouble));
  model::SplitMetrics* splitMetrics = model::capability<model::SplitMetrics>(model);
  const std::int64_t rowWidth = splitMetrics != nullptr ? splitMetrics->splitRowWidth() : 0;
  std::vector<at::Tensor> rows;  // per batch [B, rowWidth] on the CPU
  const ForecastKind forecasts = forecastKind(data.info(), options.task);
  std::vector<at::Tensor> forecastParts;  // per batch, Note [Forecast metrics]
  const Speaker speaker = findSpeaker(control, count);
  const int world = control.size();
  WorkProgress::Options shown;
  shown.label = "eval " + nameOf(split, options);
  shown.total = count;
  shown.speaks = control.rank() == speaker.rank;
  shown.mode = options.progress;
  shown.tag = "train";
  shown.startLine = fmt::format("{}{}: {} samples, batches of {}", shown.label, options.context,
                                speaker.total, options.microBatch);
  if (world > 1)
    shown.startLine +=
        fmt::format(" per rank; rank {} has the most ({}) and reports", speaker.rank, count);
  if (options.boundSamples > 0) {
    const std::int64_t bound = options.boundSamples;
    shown.hint = [bound, world](double perSecond) {
      // train.eval_batches = N evaluates N * global batch samples, a share of them per rank:
      // N for an evaluation of about 30 s.
      const double perRank = static_cast<double>(bound) / world;
      const auto n = std::max<std::int64_t>(1, static_cast<std::int64_t>(30 * perSecond / perRank));
      return fmt::format("; bound it with train.eval_batches={} (about 30 s)", n);
    };
  }
  if (options.announceAtOnce) shown.quietSeconds = 0;
  WorkProgress progress(shown);
  MemoryPhase phase("evaluating the " + (options.name.empty()
                                             ? std::string(data::toString(split)) + " split"
                                             : options.name));
  std::int64_t batchSize = options.microBatch;
  // Note [Evaluation batch]: the peak within the budget is the process's, not only LibTorch's.
  // Where the heap the steps keep is more than the room's margin, memory goes back as it is
  // freed (page faults: slower); in a larger room the margin holds it.
  std::optional<ReturnFreedHostMemory> returned;
  if (returnsFreedHostMemory(options.roomBytes, device)) returned.emplace();
  bool leftEarly = false;
  for (std::int64_t begin = 0; begin < count;) {
    if (options.leaveOnStop && stopSeen() != 0) {  // Note [Stopping within seconds]
      leftEarly = true;
      break;
    }
    const std::int64_t end = std::min(count, begin + batchSize);
    dist::maybeSlowEvalBatch();
    data::Batch batch = data.evalBatch(split, begin, end, at::kFloat);
    BatchSums done;
    std::int64_t peak = -1;
    try {
      done = evaluateBatch(model, batch, device, options, rowWidth > 0 ? splitMetrics : nullptr,
                           forecasts, peak);
    } catch (const std::exception& e) {
      const std::optional<OutOfMemory> oom = asOutOfMemory(e);
      if (!options.batchChosen || end - begin == 1 || !oom) throw;
      takeFailedPhase();
      releaseCachedDeviceMemory(device);
      batchSize = std::max<std::int64_t>(1, (end - begin) / 2);
      log::get("train").warn(
          "eval {}: a batch of {} samples did not fit the {} memory budget (an allocation of {} "
          "failed); evaluating in batches of {} from here on",
          data::toString(split), end - begin, oom->device,
          str::humanBytes(static_cast<double>(oom->requestedBytes)), batchSize);
      continue;
    }
    sums[1] += done.loss.to(at::kDouble);
    for (std::size_t i = 0; i < done.metrics.size() && i < names.size(); ++i)
      sums[static_cast<std::int64_t>(i) + 2] += done.metrics[i].second.to(at::kDouble);
    if (done.rows.defined()) rows.push_back(done.rows);
    if (done.forecasts.defined()) forecastParts.push_back(done.forecasts);
    dist::Watchdog::instance().progress();
    progress.update(end);
    // A full batch's peak bounds the next (Note [Evaluation batch]).
    if (options.batchChosen && end - begin == batchSize)
      batchSize = grownEvalBatch(batchSize, peak, options.roomBytes, options.batchLimit);
    begin = end;
  }
  if (batchSize != options.microBatch)
    log::get("train").debug("eval {}: batches of {} at the end (from {})", data::toString(split),
                            batchSize, options.microBatch);
  options.microBatch = batchSize;
  progress.finish();
  sums[0] += static_cast<double>(count);
  // The last entry counts the ranks that left early: the agreement costs no collective.
  at::Tensor total =
      at::cat({sums.to(at::kCPU), at::full({1}, leftEarly ? 1.0 : 0.0, at::kDouble)});
  control.allReduce(total, dist::ReduceOp::kSum, "eval metrics");
  auto t = total.accessor<double, 1>();
  if (t[total.size(0) - 1] > 0) {
    options.abandoned = true;
    model.train(wasTraining);
    return {};
  }
  const double terms = std::max(1.0, t[0] * static_cast<double>(model.termsPerSample()));
  const std::string prefix = nameOf(split, options) + "_";
  std::map<std::string, double> results{{prefix + "loss", t[1] / terms},
                                        {prefix + "samples", t[0]}};
  for (std::size_t i = 0; i < names.size(); ++i)
    results[prefix + names[i]] = t[i + 2] / terms;
  if (rowWidth > 0) {
    at::Tensor allRows = gatherSplitRows(control, rows, rowWidth);
    for (const auto& [name, value] : splitMetrics->splitMetrics(allRows))
      results[prefix + name] = value;
  }
  if (forecasts != ForecastKind::kNone) {
    at::Tensor all = gatherSplitRows(control, forecastParts, kForecastWidth);
    // The model's own metrics (its mse, accuracy, a panel's daily ic) stay as it computed them.
    BaselineInputs inputs = baselineInputs(all, data.info());
    useTrainSplit(inputs, forecasts, options.recorded, data.info(), "");
    for (const auto& [name, value] : judgeForecasts(forecasts, all, inputs))
      results.emplace(prefix + name, value);
    if (options.keepForecastRows) options.forecastRows = all;
  }
  model.train(wasTraining);
  return results;
}

namespace {

constexpr ExitCode kEvalDataCode = ExitCode::kData;

// Rows of a NUL-padded [rows, width] uint8 dataset as strings.
std::vector<std::string> readTextRows(hid_t group, const std::string& name) {
  at::Tensor rows = h5::readTensor(group, name, kEvalDataCode, at::kByte);
  if (rows.dim() == 1) rows = rows.unsqueeze(1);
  std::vector<std::string> out;
  const auto* bytes = rows.data_ptr<std::uint8_t>();
  const std::int64_t width = rows.size(1);
  for (std::int64_t r = 0; r < rows.size(0); ++r) {
    std::string text(reinterpret_cast<const char*>(bytes + r * width),
                     static_cast<std::size_t>(width));
    text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
    out.push_back(text);
  }
  return out;
}

}  // namespace

std::optional<ExactMatch> arithmeticExactMatch(model::Model& model, const std::string& dataPath,
                                               std::int64_t maxProblems) {
  std::vector<std::string> prompts, answers, ops;
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    h5::Handle file = h5::openFile(dataPath, false, kEvalDataCode);
    if (!h5::isGroup(file.get(), "heldout")) return std::nullopt;
    h5::Handle group = h5::openGroup(file.get(), "heldout", kEvalDataCode);
    prompts = readTextRows(group.get(), "prompts");
    answers = readTextRows(group.get(), "answers");
    ops = readTextRows(group.get(), "ops");
  }
  if (prompts.size() != answers.size() || prompts.size() != ops.size())
    throw DataError(dataPath + ": /heldout/prompts, answers and ops differ in length");
  std::size_t count = prompts.size();
  if (maxProblems > 0) count = std::min<std::size_t>(count, static_cast<std::size_t>(maxProblems));

  // Greedy answers, one batch per prompt length (generate() takes equal-length rows).
  std::size_t longestAnswer = 1;
  for (std::size_t i = 0; i < count; ++i)
    longestAnswer = std::max(longestAnswer, answers[i].size());
  model::SamplingOptions options;
  options.maxNewTokens = static_cast<std::int64_t>(longestAnswer) + 2;
  options.stopTokens = {'\n'};
  // In the corpus every problem follows the previous one's newline; the prompt starts the same
  // way, so the model knows a new problem begins (not the middle of a number).
  std::vector<std::string> inputs(count);
  for (std::size_t i = 0; i < count; ++i)
    inputs[i] = "\n" + prompts[i];
  std::map<std::size_t, std::vector<std::size_t>> byLength;
  for (std::size_t i = 0; i < count; ++i)
    byLength[inputs[i].size()].push_back(i);
  std::vector<std::string> generated(count);
  WorkProgress::Options shown;
  shown.label = "exact match";
  shown.unit = "problems";
  shown.total = static_cast<std::int64_t>(count);
  shown.tag = "train";
  shown.startLine = fmt::format("exact match: greedy answers to {} held-out problems", count);
  WorkProgress progress(shown);
  for (const auto& [length, indices] : byLength) {
    at::Tensor batch = at::empty(
        {static_cast<std::int64_t>(indices.size()), static_cast<std::int64_t>(length)}, at::kLong);
    for (std::size_t row = 0; row < indices.size(); ++row) {
      const std::string& p = inputs[indices[row]];
      for (std::size_t c = 0; c < length; ++c)
        batch[row][c] = static_cast<std::int64_t>(static_cast<unsigned char>(p[c]));
    }
    std::vector<model::Generation> out = model::generate(model, batch, options);
    for (std::size_t row = 0; row < indices.size(); ++row)
      generated[indices[row]] = out[row].text;
    progress.advance(static_cast<std::int64_t>(indices.size()));
  }
  progress.finish();

  ExactMatch result;
  for (std::size_t i = 0; i < count; ++i) {
    std::string got = generated[i];
    if (!got.empty() && got.back() == '\n') got.pop_back();
    bool right = got == answers[i];
    auto& op = result.perOperation[ops[i]];
    op.total += 1;
    op.correct += right ? 1 : 0;
    result.overall.total += 1;
    result.overall.correct += right ? 1 : 0;
    if (!right && result.mistakes.size() < 5)
      result.mistakes.push_back(prompts[i] + " -> " + got + " (expected " + answers[i] + ")");
  }
  return result;
}

}  // namespace mb::train
