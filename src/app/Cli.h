#pragma once
// The `megabatch` command line: subcommands, their options, and dispatch. Each command's
// body lives in its own *Command.cpp file.
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mb {
struct PeriodSelection;
}
namespace mb::data {
struct DataInfo;
}
namespace mb::dist {
class Runtime;
}
namespace mb::train {
class JsonRecord;
}

namespace mb::app {

struct ParsedArgs {
  std::string command;                        // "train", "data", ...
  std::string subcommand;                     // "synth-series" for `data synth-series`
  std::map<std::string, std::string> values;  // --config FILE -> {"config", "FILE"}
  std::set<std::string> flags;                // --print-config -> "print-config"
  std::vector<std::string> positionals;       // key=value overrides, FILE arguments

  bool has(const std::string& name) const { return values.count(name) || flags.count(name); }
  std::string get(const std::string& name, const std::string& fallback = {}) const;
  double getDouble(const std::string& name, double fallback) const;
  long getInt(const std::string& name, long fallback) const;
};

// Entry point used by main(): returns the process exit code.
int main(int argc, char** argv);

// Commands (one file each). They return an exit code or throw mb::Error.
int runTrain(const ParsedArgs& args, dist::Runtime& runtime);
int runEval(const ParsedArgs& args, dist::Runtime& runtime);
int runPredict(const ParsedArgs& args, dist::Runtime& runtime);
int runSample(const ParsedArgs& args, dist::Runtime& runtime);
int runData(const ParsedArgs& args, dist::Runtime& runtime);
int runInspect(const ParsedArgs& args, dist::Runtime& runtime);
int runPlot(const ParsedArgs& args, dist::Runtime& runtime);
int runExport(const ParsedArgs& args, dist::Runtime& runtime);
int runWalk(const ParsedArgs& args, dist::Runtime& runtime);

// eval and predict --from/--to (Note [Selected period]; EvalCommand.cpp): the period loaded as
// the test split, as fields of a JSON record (in words: train::describePeriod).
void addPeriodFields(train::JsonRecord& record, const PeriodSelection& period,
                     const data::DataInfo& info);

}  // namespace mb::app
