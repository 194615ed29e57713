// What the TensorBoard event files cost a log line (run.tensorboard; Note [TensorBoard event
// files]): a train record as the trainer writes one (26 fields), written N times to
// metrics.jsonl alone and to metrics.jsonl with the event file, in alternating rounds, into a
// temporary folder. Prints each round and the medians: seconds per line of each, their ratio,
// and the event file's own cost per line (the difference).
//   megabatch_bench_tensor_board [LINES_PER_ROUND] [ROUNDS]     defaults 20000, 7
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "train/watch/Metrics.h"
#include "train/watch/TensorBoard.h"

namespace {

namespace fs = std::filesystem;
using mb::train::JsonRecord;

JsonRecord trainRecord(std::int64_t step) {
  JsonRecord r;
  const double x = static_cast<double>(step);
  r.add("event", "train").add("step", step).add("epoch", std::int64_t{0}).add("split", "train");
  r.add("loss", 0.7 / (1 + x * 1e-3)).add("lr", 1e-3).add("samples_per_s", 5123.4 + x);
  r.add("tokens_per_s", 1.2e6 + x).add("step_time_s", 0.0251).add("micro_batches", std::int64_t{1});
  r.add("data_time_s", 1e-4).add("fwd_bwd_time_s", 0.021).add("comm_time_s", 0.002);
  r.add("optimizer_time_s", 0.001).add("other_time_s", 0.0011);
  r.add("between_steps_eval_s", 0.0).add("between_steps_checkpoint_s", 0.0);
  r.add("mem_mb", 812.5).add("mem_peak_mb", 830.25).add("grad_norm", 0.31 + x * 1e-6);
  r.add("skipped_steps", std::int64_t{0}).add("loss_scale", 65536.0);
  r.addTime("time", mb::train::unixSeconds());
  return r;
}

double secondsPerLine(const fs::path& dir, std::int64_t lines, bool tensorboard) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  mb::train::MetricsWriter metrics((dir / "metrics.jsonl").string(), 0);
  if (tensorboard)
    metrics.alsoWriteTo(std::make_unique<mb::train::TensorBoardWriter>(
        (dir / "tensorboard").string(), 0, "run: {dir: bench}\n"));
  std::vector<JsonRecord> records;
  for (std::int64_t i = 1; i <= lines; ++i)
    records.push_back(trainRecord(i));
  const auto start = std::chrono::steady_clock::now();
  for (const auto& record : records)
    metrics.write(record);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return took.count() / static_cast<double>(lines);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t lines = argc > 1 ? std::atoll(argv[1]) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const fs::path dir =
      fs::temp_directory_path() / ("mb-tensorboard-bench-" + std::to_string(getpid()));
  std::vector<double> jsonOnly, withEvents, ratios;
  for (int round = 0; round < rounds; ++round) {
    const double a = secondsPerLine(dir, lines, false);
    const double b = secondsPerLine(dir, lines, true);
    jsonOnly.push_back(a);
    withEvents.push_back(b);
    ratios.push_back(b / a);
    std::printf("round %d: metrics.jsonl %.2f us/line, with events %.2f us/line (%.2fx)\n",
                round + 1, 1e6 * a, 1e6 * b, b / a);
  }
  fs::remove_all(dir);
  const double a = median(jsonOnly), b = median(withEvents);
  std::printf(
      "median of %d rounds of %lld lines: metrics.jsonl %.2f us/line, with the event file %.2f "
      "us/line, ratio %.2fx (median of per-round ratios %.2fx); the event file costs %.2f us "
      "= %.4f ms per log line\n",
      rounds, static_cast<long long>(lines), 1e6 * a, 1e6 * b, b / a, median(ratios), 1e6 * (b - a),
      1e3 * (b - a));
  return 0;
}
