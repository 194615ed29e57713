#include "train/watch/TensorBoard.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <boost/crc.hpp>

#include "TensorBoardEvent.pb.h"
#include "common/Environment.h"
#include "common/Error.h"
#include "train/watch/Metrics.h"
#include "train/watch/RecordFile.h"
#include "train/watch/TrainLog.h"

// Note [TensorBoard event files]
// TensorBoard reads a run's scalars from files named events.out.tfevents.TIME.HOST.PID: a
// sequence of records, each a protobuf Event framed as TFRecord frames them (the little-endian
// uint64 length, the masked CRC-32C of those 8 bytes, the Event's bytes, their masked CRC-32C).
// The messages come from protoc (TensorBoardEvent.proto, TensorBoard's field numbers), the
// CRC-32C from Boost.CRC. What goes in:
// - file_version "brain.Event:2", first, as every writer does;
// - in a resumed run's file, a SessionLog START at the first step it trains (the checkpoint's
//   step + 1; step 1 where earlier files exist but no checkpoint: a run that died before its
//   first, found by the fault soak). TensorBoard then drops what earlier files hold from that step
//   on: the steps a killed run took past its checkpoint, which the resumed run trains again. So
//   every step shows once, as metrics.jsonl, which drops the same records, holds it;
// - the resolved config as text (the text plugin, tag "config"), at the file's first step;
// - for every metrics.jsonl record, one Event at its step and time holding each of its numbers
//   but "step" and "time" as a scalar: tag "train/<field>" for train records, "<split>/<field>"
//   for evaluations (val/loss, test/mae), "<event>/<field>" for the other kinds (memory_plan,
//   checkpoint, restart, oom_redo).
// Each Event is written and flushed at once, as metrics.jsonl's line is, so a kill -9 leaves
// at most one torn record at the end, which readers skip. A file that cannot be opened is
// reported once and left: the run does not stop for its curves. Events a full disk refuses are
// held and written later (Note [Records held while the disk is full] in RecordFile.h).
namespace mb::train {
namespace {

namespace tbpb = megabatch::tensorboard;

using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

void putLittleEndian(std::uint64_t value, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i)
    out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// events.out.tfevents.TIME.HOST.PID. Readers take a folder's files in name order, so TIME is
// later than every earlier file's, even for a resume within the second of a kill.
std::string eventFileName(const std::string& directory, double wallTime) {
  const std::string prefix = "events.out.tfevents.";
  long long seconds = static_cast<long long>(wallTime);
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0)
      seconds = std::max(seconds, std::atoll(name.c_str() + prefix.size()) + 1);
  }
  return fmt::format("{}{:010d}.{}.{}", prefix, seconds, env::hostName(),
                     static_cast<long long>(getpid()));
}

// "train/loss", "val/mae", "baseline_val/zero_mse", "memory_plan/total_bytes" (Note
// [TensorBoard event files]).
std::string scalarPrefix(const JsonRecord& record) {
  const std::string kind = record.text("event");
  if (kind == "eval") {
    const std::string split = record.text("split");
    return split.empty() ? "val" : split;
  }
  if (kind == "baseline") return "baseline_" + record.text("split");
  return kind.empty() ? "train" : kind;
}

// The config as Markdown: indented four spaces, so that the text plugin keeps its layout.
std::string configMarkdown(const std::string& yaml) {
  std::string out;
  std::size_t start = 0;
  while (start < yaml.size()) {
    std::size_t end = yaml.find('\n', start);
    if (end == std::string::npos) end = yaml.size();
    out += "    " + yaml.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

// Event files of an earlier start: a run that died before its first checkpoint leaves some, and
// the new run, starting again from step 0, trains their steps again.
bool holdsEventFiles(const std::string& directory) {
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end;
       it.increment(error))
    if (it->path().filename().string().rfind("events.out.tfevents.", 0) == 0) return true;
  return false;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  Crc32c crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

std::uint32_t maskedCrc32c(const void* data, std::size_t size) {
  // TFRecord stores the CRC rotated and offset, so that a CRC of data holding CRCs stays strong.
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

TensorBoardWriter::TensorBoardWriter(std::string directory, std::int64_t resumeStep,
                                     std::string configText)
    : directory_(std::move(directory)),
      resumeStep_(resumeStep),
      configText_(std::move(configText)) {}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::open(double wallTime, std::int64_t step) {
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  const bool afterEarlierFiles = resumeStep_ > 0 || holdsEventFiles(directory_);
  path_ = (std::filesystem::path(directory_) / eventFileName(directory_, wallTime)).string();
  try {
    file_ = std::make_unique<RecordFile>(path_, "the TensorBoard file");
  } catch (const Error& error) {
    trainLog().warn(
        "{}; training goes on without TensorBoard events (metrics.jsonl has every number). Make "
        "run.dir/tensorboard writable, or set run.tensorboard=false",
        error.message());
    return;
  }
  tbpb::Event version;
  version.set_wall_time(wallTime);
  version.set_file_version("brain.Event:2");
  append(version.SerializeAsString());
  if (afterEarlierFiles) {
    tbpb::Event start;
    start.set_wall_time(wallTime);
    start.set_step(resumeStep_ + 1);
    start.mutable_session_log()->set_status(tbpb::SessionLog::START);
    append(start.SerializeAsString());
  }
  tbpb::Event config;
  config.set_wall_time(wallTime);
  config.set_step(step);
  tbpb::Summary::Value* value = config.mutable_summary()->add_value();
  value->set_tag("config");
  value->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tbpb::TensorProto* tensor = value->mutable_tensor();
  tensor->set_dtype(tbpb::DT_STRING);
  tensor->mutable_tensor_shape();  // a scalar: no dims
  tensor->add_string_val(configMarkdown(configText_));
  append(config.SerializeAsString());
}

void TensorBoardWriter::write(const JsonRecord& record) {
  double wallTime = unixSeconds();
  std::int64_t step = 0;
  for (const auto& [key, number] : record.numbers()) {
    if (key == "time") wallTime = number;
    if (key == "step") step = static_cast<std::int64_t>(number);
  }
  if (file_ == nullptr && path_.empty()) open(wallTime, step);
  if (file_ == nullptr) return;
  tbpb::Event event;
  event.set_wall_time(wallTime);
  event.set_step(step);
  const std::string prefix = scalarPrefix(record) + "/";
  tbpb::Summary* summary = event.mutable_summary();
  for (const auto& [key, number] : record.numbers()) {
    if (key == "step" || key == "time") continue;
    tbpb::Summary::Value* value = summary->add_value();
    value->set_tag(prefix + key);
    value->set_simple_value(static_cast<float>(number));
  }
  if (summary->value_size() > 0) append(event.SerializeAsString());
}

void TensorBoardWriter::append(const std::string& event) {
  char header[12];
  putLittleEndian(event.size(), 8, header);
  putLittleEndian(maskedCrc32c(header, 8), 4, header + 8);
  char footer[4];
  putLittleEndian(maskedCrc32c(event.data(), event.size()), 4, footer);
  std::string frame(header, sizeof(header));
  frame += event;
  frame.append(footer, sizeof(footer));
  file_->append(std::move(frame));  // whole, or held until the disk has room
}

}  // namespace mb::train
