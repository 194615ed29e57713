#include "train/DataContinuity.h"

#include <vector>

#include "common/Error.h"
#include "common/Strings.h"
#include "data/ShardedData.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/Agreement.h"
#include "train/Trainer.h"
#include "train/watch/Metrics.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace {

// "train [480, 79803) -> [480, 87898) (...)" for each split that moved; "" when none did.
std::string movedSplits(const data::DataIdentity& before, const data::DataIdentity& now) {
  std::vector<std::string> moved;
  for (int s = 0; s < 3; ++s) {
    const auto& a = before.splits[s];
    const auto& b = now.splits[s];
    if (a.begin == b.begin && a.end == b.end) continue;
    moved.push_back(std::string(data::toString(static_cast<data::Split>(s))) + " " +
                    data::describeRange(a, before.splitTimes[s], before.timeUnit) + " -> " +
                    data::describeRange(b, now.splitTimes[s], now.timeUnit));
  }
  return str::join(moved, ", ");
}

// The fingerprint without the file's name (its first field): a copy of the file elsewhere is
// the same data.
std::string contentOf(const std::string& fingerprint) {
  const auto bar = fingerprint.find('|');
  return bar == std::string::npos ? fingerprint : fingerprint.substr(bar);
}

std::string remedies(const Config& config, bool fractions) {
  std::string text =
      "put the file the run trained on back at data.path; or start a new run on this data from "
      "this one's weights (a new run.dir and train.init_from=" +
      config.run.dir +
      "); or resume anyway with run.allow_data_change=true (recorded in metrics.jsonl and the "
      "checkpoints)";
  if (fractions)
    text +=
        ". Fraction splits move whenever rows are added: split by time "
        "(data.split.train_until and val_until, docs/data-format.md) to keep them";
  return text;
}

DataContinuity accept(const Config& config, const std::string& what, const std::string& hint) {
  if (!config.run.allowDataChange) throw DataError(what, hint);
  DataContinuity result;
  result.changed = true;
  result.line = what + "; resuming anyway (run.allow_data_change = true)";
  result.record = what;
  return result;
}

}  // namespace

DataContinuity judgeDataContinuity(const CheckpointContent& resumed, const std::string& checkpoint,
                                   const data::DataInfo& now, const Config& config) {
  const std::string head = config.data.path + " is not the data " + checkpoint + " trained on: ";
  const std::optional<data::DataIdentity> before = data::identityFromYaml(resumed.dataIdentityYaml);
  const std::optional<data::DataIdentity> current = data::identityFromYaml(now.identityYaml);
  if (!before || !current) {  // a checkpoint from before the identity: its fingerprint decides
    if (contentOf(resumed.dataFingerprint) == contentOf(now.fingerprint)) return {};
    return accept(config,
                  head + "its fingerprint was " + resumed.dataFingerprint + ", the file's is " +
                      now.fingerprint,
                  remedies(config, !now.splitsByTime));
  }
  const data::DataChange change = data::compareData(*before, *current, config.data.path);
  const bool held = change.trainHeld && change.valHeld;
  const std::string samples =
      std::to_string(before->samples) + " -> " + std::to_string(current->samples) + " samples";
  if (change.kind == data::DataChange::Kind::kSame && held) return {};
  if (change.kind == data::DataChange::Kind::kAppended && held) {
    DataContinuity result;
    result.line =
        config.data.path + " grew since " + checkpoint + ": " + samples + " (+" +
        std::to_string(current->samples - before->samples) +
        "), rows appended; the splits by time held train and val, " +
        (movedSplits(*before, *current).empty()
             ? std::string("and test")
             : "and test is now " + data::describeRange(current->splits[2], current->splitTimes[2],
                                                        current->timeUnit));
    return result;
  }
  std::vector<std::string> what;
  if (change.kind == data::DataChange::Kind::kChanged)
    what.push_back("the file changed (" + str::join(change.differences, "; ") + ")");
  else if (change.kind == data::DataChange::Kind::kAppended)
    what.push_back("rows were appended (" + samples + ")");
  const std::string moved = movedSplits(*before, *current);
  if (!held) what.push_back("the splits moved: " + moved);
  return accept(config, head + str::join(what, ", and "), remedies(config, !current->splitsByTime));
}

// --- the trainer's side ------------------------------------------------------------

void Trainer::checkDataContinuity(const std::optional<CheckpointContent>& resumed) {
  if (!resumed) return;
  DataContinuity result;
  dist::agreed(control(), "comparing the data with the checkpoint's", [&] {
    if (!isRoot()) return;
    result = judgeDataContinuity(*resumed, resumedFrom_, data_->info(), config_);
  });
  if (!isRoot() || result.line.empty()) return;
  if (!result.changed) {
    trainLog().info("{}", result.line);
    return;
  }
  trainLog().warn("{}", result.line);
  if (!dataChanges_.empty()) dataChanges_ += "\n";
  dataChanges_ += "step " + std::to_string(state_.step) + ": " + result.record;
  dataChangePending_ = result.record;  // written once metrics.jsonl is open
}

void Trainer::recordDataChange() {
  if (dataChangePending_.empty() || !metrics_) return;
  JsonRecord record;
  record.add("event", "data_change").add("step", state_.step).add("change", dataChangePending_);
  record.add("accepted_by", "run.allow_data_change").addTime("time", unixSeconds());
  metrics_->write(record);
  dataChangePending_.clear();
}

}  // namespace mb::train
