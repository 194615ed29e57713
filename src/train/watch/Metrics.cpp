#include "train/watch/Metrics.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "common/Error.h"
#include "train/checkpoints/DurableFile.h"
#include "train/watch/RecordFile.h"
#include "train/watch/TensorBoard.h"

namespace mb::train {
namespace {

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::int64_t stepOfRecord(const std::string& line) {
  static const std::regex pattern("\"step\":(-?[0-9]+)");
  std::smatch match;
  if (!std::regex_search(line, match, pattern)) return -1;
  return std::stoll(match[1]);
}

// "STEP/SPLIT" of an eval record's line; "" for other kinds.
std::string evaluationOfRecord(const std::string& line) {
  if (line.find("\"event\":\"eval\"") == std::string::npos) return {};
  static const std::regex split("\"split\":\"([^\"]*)\"");
  std::smatch match;
  return std::to_string(stepOfRecord(line)) + "/" +
         (std::regex_search(line, match, split) ? match[1].str() : std::string("val"));
}

// Every record is one object on one line; a line that does not close it was cut short.
bool isTorn(const std::string& line) {
  const std::size_t last = line.find_last_not_of(" \t\r");
  return last == std::string::npos || line[last] != '}';
}

bool endsWithoutNewline(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file || file.tellg() <= 0) return false;
  file.seekg(-1, std::ios::end);
  return file.get() != '\n';
}

}  // namespace

JsonRecord& JsonRecord::add(const std::string& key, double value) {
  char buffer[40];
  if (std::isfinite(value)) {
    std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%s",
                  std::isnan(value) ? "NaN"
                  : value > 0       ? "Infinity"
                                    : "-Infinity");
  }
  fields_.emplace_back(key, buffer);
  numbers_.emplace_back(key, std::strtod(buffer, nullptr));  // NaN and Infinity read back too
  return *this;
}

JsonRecord& JsonRecord::addTime(const std::string& key, double unixSeconds) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.3f", unixSeconds);
  fields_.emplace_back(key, buffer);
  numbers_.emplace_back(key, std::strtod(buffer, nullptr));
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& key, std::int64_t value) {
  fields_.emplace_back(key, std::to_string(value));
  numbers_.emplace_back(key, static_cast<double>(value));
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, quote(value));
  texts_.emplace_back(key, value);
  return *this;
}

std::string JsonRecord::text(const std::string& key) const {
  for (const auto& [name, value] : texts_)
    if (name == key) return value;
  return {};
}

std::string JsonRecord::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (i) out += ",";
    out += quote(fields_[i].first) + ":" + fields_[i].second;
  }
  return out + "}";
}

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t resumedStep) : path_(path) {
  std::ifstream existing(path);
  if (existing) {
    std::vector<std::string> kept;
    // A run killed mid-write leaves a torn last line, perhaps without its newline: appending to
    // it would glue the next record onto it, so the file is rewritten without it.
    bool dropped = endsWithoutNewline(path);
    for (std::string line; std::getline(existing, line);) {
      if (line.empty()) continue;
      if (isTorn(line) || stepOfRecord(line) > resumedStep) {
        dropped = true;
      } else {
        kept.push_back(line);
        const std::string evaluation = evaluationOfRecord(line);
        if (!evaluation.empty()) recordedEvaluations_.insert(evaluation);
      }
    }
    existing.close();
    if (dropped) {
      std::string text;
      for (const auto& line : kept)
        text += line + "\n";
      writeFileAtomically(path, text);
    }
  }
  out_ = std::make_unique<RecordFile>(path, "metrics.jsonl");
}

void MetricsWriter::write(const JsonRecord& record) {
  if (record.text("event") == "eval") {
    // A resumed run evaluates again a step whose checkpoint came before its evaluation (Note
    // [Checkpoint before evaluation]), for the early-stopping state; a record the file holds
    // already is not written twice.
    std::int64_t step = -1;
    for (const auto& [key, value] : record.numbers())
      if (key == "step") step = static_cast<std::int64_t>(value);
    const std::string split = record.text("split");
    if (!recordedEvaluations_.insert(std::to_string(step) + "/" + (split.empty() ? "val" : split))
             .second)
      return;
  }
  out_->append(record.str() + "\n");
  if (tensorboard_) tensorboard_->write(record);
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::alsoWriteTo(std::unique_ptr<TensorBoardWriter> tensorboard) {
  tensorboard_ = std::move(tensorboard);
}

std::int64_t processMemoryBytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  long pages = 0, resident = 0;
  int read = std::fscanf(file, "%ld %ld", &pages, &resident);
  std::fclose(file);
  return read == 2 ? static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

std::int64_t processMemoryPeakBytes() {
  std::FILE* file = std::fopen("/proc/self/status", "r");
  if (file == nullptr) return 0;
  char line[256];
  long kib = 0;
  while (std::fgets(line, sizeof line, file) != nullptr)
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  std::fclose(file);
  return static_cast<std::int64_t>(kib) * 1024;
}

bool resetProcessMemoryPeak() {
  std::FILE* file = std::fopen("/proc/self/clear_refs", "w");
  if (file == nullptr) return false;
  const bool written = std::fputs("5", file) >= 0;
  return std::fclose(file) == 0 && written;
}

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace mb::train
