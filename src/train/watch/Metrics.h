#pragma once
// metrics.jsonl: one JSON object per log event (DESIGN.md "Run directory"), written by rank 0.
// Train records: {"event":"train","step","epoch","split":"train","loss","lr","samples_per_s",
// "tokens_per_s","step_time_s","data_time_s","comm_time_s","mem_mb","grad_norm","time"};
// eval records: {"event":"eval","step","epoch","split":"val","loss",<metrics>...,"time"};
// baseline records, once per split at a run's first evaluation (Note [Baselines]):
// {"event":"baseline","step","split","samples","zero_mse","zero_skill",...,"time"}.
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mb::train {

// A flat JSON object built field by field (numbers, strings, booleans).
class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double value);
  // Unix seconds to the millisecond (add() keeps 9 digits: a 2026 time to 100 s).
  JsonRecord& addTime(const std::string& key, double unixSeconds);
  JsonRecord& add(const std::string& key, std::int64_t value);
  JsonRecord& add(const std::string& key, const std::string& value);
  JsonRecord& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  std::string str() const;
  // The number fields, each as metrics.jsonl holds it (the value its text reads back as), and
  // a string field's text ("" when the record has none): what the TensorBoard writer reads.
  const std::vector<std::pair<std::string, double>>& numbers() const { return numbers_; }
  std::string text(const std::string& key) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::pair<std::string, double>> numbers_;
  std::vector<std::pair<std::string, std::string>> texts_;
};

class TensorBoardWriter;

class RecordFile;

class MetricsWriter {
 public:
  // Opens run.dir/metrics.jsonl for appending. On resume from `resumedStep`, records of steps
  // after it (written by a run that died before its next checkpoint) are dropped first, so the
  // step sequence continues with no repeats.
  MetricsWriter(const std::string& path, std::int64_t resumedStep);
  ~MetricsWriter();
  // Every record from now on goes to `tensorboard` as well (run.tensorboard).
  void alsoWriteTo(std::unique_ptr<TensorBoardWriter> tensorboard);
  void write(const JsonRecord& record);

 private:
  std::string path_;
  std::unique_ptr<RecordFile> out_;  // Note [Records held while the disk is full]
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::set<std::string> recordedEvaluations_;  // "STEP/SPLIT" of the eval records written
};

// Wall-clock seconds since 1970, with a fraction (records' "time" where seconds matter).
double unixSeconds();

// The resident set size (RSS) of this process in bytes, from /proc/self/statm; 0 when it cannot
// be read. Host memory only, also in CUDA builds: device memory is not part of it.
std::int64_t processMemoryBytes();
// The most RSS this process has held (VmHWM in /proc/self/status) since it started or since the
// last resetProcessMemoryPeak(); 0 when it cannot be read.
std::int64_t processMemoryPeakBytes();
// Sets the peak back to the RSS now (writes 5 to /proc/self/clear_refs); false when the kernel
// refuses.
bool resetProcessMemoryPeak();

}  // namespace mb::train
