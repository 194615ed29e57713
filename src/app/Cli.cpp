#include "app/Cli.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>

#include "common/Error.h"
#include "common/HostAllocator.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "common/TorchCompat.h"
#include "dist/CpuThreads.h"
#include "dist/Runtime.h"
#include "megabatch/Version.h"
#include "model/ModelRegistry.h"
#include "train/Signals.h"
#include "train/precision/DeviceProbe.h"

namespace mb::app {
namespace {

struct OptionSpec {
  std::string name;  // without the leading "--"
  bool takesValue;
  std::string help;
};

struct CommandSpec {
  std::string name;
  std::string usage;
  std::string summary;
  std::vector<OptionSpec> options;
  bool takesPositionals;
  std::function<int(const ParsedArgs&, dist::Runtime&)> run;
  std::string note = {};  // printed after the options by `megabatch COMMAND --help`
};

// Note [TorchScript code]: model.kind = torchscript loads an archive and runs its code.
const char* kTorchScriptNote =
    "security: with model.kind = torchscript, megabatch runs the TorchScript code of the archive\n"
    "model.path (not arbitrary Python, but code): train, eval, predict and export only archives\n"
    "you trust. Checkpoints hold tensors only (no pickles, no code).";

// eval and predict: Note [Selected period] in data/pipeline/TimeSplits.h.
const char* const kFromHelp =
    "only samples at or after this time: an ISO-8601 UTC date or date-time, or a number in the "
    "file's data.time_unit";
const char* const kToHelp = "only samples before this time (same forms as --from)";
// eval and predict: Note [Precision of a new run] in train/precision/Precision.h.
constexpr const char* kPrecisionHelp =
    "fp32, bf16, fp16 or auto (default: the training precision on a GPU; on the CPU, bf16 where "
    "the checkpoint trained in bf16 and bf16 pays on this CPU, else fp32)";

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> table{
      {"train",
       "megabatch train --config FILE [key=value ...]",
       "train a model; re-running the same command resumes from the last checkpoint",
       {{"config", true, "YAML config (see configs/)"},
        {"print-config", false, "print the resolved config and exit"},
        {"help-config", false, "list every config key with its type and meaning"}},
       true,
       runTrain,
       kTorchScriptNote},
      {"walk",
       "megabatch walk --config FILE [key=value ...]",
       "walk-forward: train a fold per calendar period (walk.*), predict the period after it, "
       "and judge every out-of-sample prediction together; re-running the same command goes "
       "on where it stopped",
       {{"config", true, "YAML config with a walk: section (see configs/demo-walk.yaml)"},
        {"plan", false,
         "print each fold's periods, cuts and samples (JSON lines) and exit: nothing is trained"},
        {"fold", true,
         "train and predict only the fold of this first day (YYYY-MM-DD, as --plan names it): "
         "one task of a job array (slurm/walk.sh); `megabatch walk` then stitches and reports"},
        {"print-config", false, "print the resolved config and exit"}},
       true,
       runWalk,
       kTorchScriptNote},
      {"eval",
       "megabatch eval --checkpoint CKPT [--data FILE] [--split val|test] [--from T] [--to T] "
       "[--by day|week|month|quarter|year] [--batch N] [--memory-budget-mb MB] "
       "[--max-samples N] [--precision P] [--out FILE.json|FILE.csv]\n"
       "       megabatch eval --predictions FILE.h5 [--by PERIOD|fold] [--out FILE.json|FILE.csv]",
       "loss, metrics and baselines of a checkpoint on the val or test split, or on a period; "
       "or the metrics and baselines of a predictions file",
       {{"checkpoint", true, "checkpoint file or run directory"},
        {"predictions", true,
         "judge this predictions file (megabatch predict's format; a walk's adds a table by "
         "fold) instead of a checkpoint"},
        {"data", true, "data file (default: the one the run trained on)"},
        {"split", true, "val or test (default val; with --from/--to: the period within it)"},
        {"from", true, kFromHelp},
        {"to", true, kToHelp},
        {"by", true,
         "also judge each calendar period (day, week, month, quarter or year) of the samples' "
         "timestamps alone: one row a period (--predictions: also fold, one row a fold)"},
        {"batch", true,
         "samples per forward pass per rank (default: the largest up to 256 on the CPU, the "
         "training micro-batch on a GPU, that fits the memory budget)"},
        {"memory-budget-mb", true,
         "memory per rank the evaluation may use (default: 90% of what is available)"},
        {"max-samples", true, "evaluate at most this many samples per rank (default: all)"},
        {"precision", true, kPrecisionHelp},
        {"out", true, "also write the metrics as JSON here; with --by, the table as CSV"}},
       true,
       runEval,
       kTorchScriptNote},
      {"predict",
       "megabatch predict --checkpoint CKPT --data FILE --out FILE.h5 [--split all|train|val|test] "
       "[--from T] [--to T] [--batch N] [--memory-budget-mb MB] [--precision P]",
       "write predictions to HDF5, aligned with the sample timestamps",
       {{"checkpoint", true, "checkpoint file or run directory"},
        {"data", true, "data file"},
        {"out", true, "output HDF5 file"},
        {"split", true,
         "all (default), train, val, or test (with --from/--to: the period within it)"},
        {"from", true, kFromHelp},
        {"to", true, kToHelp},
        {"batch", true,
         "samples per forward pass (default: the largest up to 512 that fits the memory budget)"},
        {"memory-budget-mb", true, "memory prediction may use (default: 90% of what is available)"},
        {"precision", true, kPrecisionHelp}},
       true,
       runPredict,
       kTorchScriptNote},
      {"sample",
       "megabatch sample --checkpoint CKPT --prompt TEXT|--prompts FILE [--max-new-tokens N] "
       "[--temperature T] [--top-k K] [--memory-budget-mb MB]",
       "generate text from a GPT checkpoint (greedy when temperature is 0)",
       {{"checkpoint", true, "checkpoint file or run directory"},
        {"prompt", true, "prompt text, e.g. \"12+34=\""},
        {"prompts", true, "a file of prompts, one per line (one output line each, with progress)"},
        {"max-new-tokens", true, "tokens to generate (default 32)"},
        {"temperature", true, "0 = greedy (default), >0 samples"},
        {"top-k", true, "sample among the k most likely tokens (0 = all)"},
        {"seed", true, "sampling seed"},
        {"stop", true, "stop at this text (default: newline)"},
        {"no-kv-cache", false, "recompute the whole context every token (for checks)"},
        {"memory-budget-mb", true,
         "memory sampling may use (default: 90% of what is available); past it, the "
         "out-of-memory message"},
        {"precision", true,
         "fp32, bf16 or fp16 (default: bf16 where the checkpoint trained in bf16 and bf16 pays on "
         "this CPU, else fp32): sampling runs on the CPU"}},
       false,
       runSample},
      {"data",
       "megabatch data synth-series|synth-panel|arith|text|graphs|synth-graphs|check [options]",
       "make datasets (synthetic series and panels, arithmetic, text to tokens, JSON-lines graphs, "
       "synthetic graphs); check loads one under a config",
       {{"out", true, "output HDF5 file"},
        {"in", true, "input text file (data text)"},
        {"rows", true, "synth-series: rows of the finest stream"},
        {"features", true,
         "synth-series: features per stream; synth-panel: per instrument; synth-graphs: node "
         "features"},
        {"streams", true, "synth-series: name:period list, e.g. m1:1,m5:5,h1:60"},
        {"targets", true, "synth-series, synth-panel: target columns"},
        {"horizon", true, "synth-series: prediction horizon in finest-stream rows"},
        {"noise", true, "synth-series: noise level"},
        {"dtype", true, "synth-series, synth-panel: float32, float16 or float64"},
        {"dates", true, "synth-panel: dates (T)"},
        {"instruments", true, "synth-panel: instruments (N)"},
        {"sectors", true, "synth-panel: sectors"},
        {"own", true, "synth-panel: weight of an instrument's own signal in its return"},
        {"peer", true, "synth-panel: weight of its sector's signal"},
        {"sector-vol", true, "synth-panel: std of the sector returns"},
        {"missing", true, "synth-panel: share of absent instrument-dates"},
        {"chunk-rows", true, "HDF5 chunk rows (0 = contiguous)"},
        {"compression", true, "none or gzip"},
        {"digits", true, "arith: digits per operand"},
        {"ops", true, "arith: operations, e.g. +- or +-*/"},
        {"problems", true, "arith: training problems"},
        {"heldout", true, "arith: held-out problems"},
        {"seed", true, "random seed"},
        {"graphs", true,
         "graphs: JSON-lines graphs, one per line; synth-graphs: how many graphs (default 3000)"},
        {"labels", true, "graphs: JSON-lines labels {\"id\", \"label\"} (else a label per graph)"},
        {"skip-bad", false, "graphs: skip (and count) bad lines instead of stopping at the first"},
        {"undirected", false, "graphs: store every edge in both directions"},
        {"shuffle", false, "graphs: write the graphs in a seeded random order (random splits)"},
        {"task", true, "graphs: auto (default), classification, or regression"},
        {"min-nodes", true, "synth-graphs: fewest nodes per graph (default 10)"},
        {"max-nodes", true, "synth-graphs: most nodes per graph (default 30)"},
        {"node-types", true, "synth-graphs: node type names A, B, ... (default 4)"},
        {"jsonl", true, "synth-graphs: also write DIR/graphs.jsonl and DIR/labels.jsonl"},
        {"config", true,
         "check: YAML config whose data section to load (key=value overrides follow)"},
        {"batches", true, "check: gather this many train batches and report the median time"},
        {"dump", true, "check: write the gathered batches to this HDF5 file (.rankR per rank)"},
        {"report", true, "check: write per-rank load statistics as JSON"}},
       true,
       runData},
      {"inspect",
       "megabatch inspect FILE|RUN_DIR",
       "describe a data file or a checkpoint (a run directory or checkpoints/latest: the "
       "checkpoint eval would load)",
       {},
       true,
       runInspect},
      {"plot",
       "megabatch plot RUN_DIR [RUN_DIR ...] [--out FILE.png] | megabatch plot PREDICTIONS.h5 "
       "[--out FILE.png]",
       "render loss, lr and throughput curves of a run to a PNG; of several runs, or of a "
       "folder of runs (a sweep's), in one PNG; of a file megabatch predict wrote, its "
       "predictions against the targets",
       {{"out", true,
         "PNG path (default RUN_DIR/curves.png; FOLDER/runs.png for a folder of runs; runs.png "
         "for several; P.png for P.h5)"}},
       true,
       runPlot},
      {"export",
       "megabatch export --checkpoint CKPT --to FILE.pt [key=value ...]",
       "write the trained weights of a model.kind = torchscript run into its TorchScript archive "
       "(for torch.jit.load)",
       {{"checkpoint", true, "checkpoint file or run directory"},
        {"to", true, "the TorchScript archive to write"}},
       true,
       runExport,
       kTorchScriptNote},
  };
  return table;
}

void printUsage(std::FILE* out) {
  std::fprintf(out,
               "megabatch %s: distributed trainer for time-ordered data (LibTorch %s)\n\n"
               "usage: megabatch COMMAND [options]\n"
               "       mpirun -np N megabatch train --config FILE [key=value ...]\n\ncommands:\n",
               MEGABATCH_VERSION, compat::torchVersion().c_str());
  for (const auto& spec : commands())
    std::fprintf(out, "  %-9s %s\n", spec.name.c_str(), spec.summary.c_str());
  std::fprintf(out,
               "\nmegabatch COMMAND --help shows a command's options.\n"
               "exit codes: 0 done, 1 failure, 2 bad command line or config, 3 bad data,\n"
               "            4 checkpoint problem, 75 stopped by a signal after a checkpoint "
               "(run again to resume)\n\n%s\n",
               kTorchScriptNote);
}

void printCommandHelp(const CommandSpec& spec) {
  std::printf("usage: %s\n\n%s\n", spec.usage.c_str(), spec.summary.c_str());
  if (!spec.options.empty()) std::printf("\noptions:\n");
  for (const auto& option : spec.options) {
    std::string left = "--" + option.name + (option.takesValue ? " VALUE" : "");
    std::printf("  %-22s %s\n", left.c_str(), option.help.c_str());
  }
  if (!spec.note.empty()) std::printf("\n%s\n", spec.note.c_str());
}

const CommandSpec* findCommand(const std::string& name) {
  for (const auto& spec : commands()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string closestOf(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t bestDistance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : candidates) {
    std::size_t distance = str::editDistance(word, candidate);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  return bestDistance <= std::max<std::size_t>(2, word.size() / 3) ? best : std::string();
}

ParsedArgs parseCommandLine(const CommandSpec& spec, int argc, char** argv, int first) {
  ParsedArgs args;
  args.command = spec.name;
  for (int i = first; i < argc; ++i) {
    std::string token = argv[i];
    if (str::startsWith(token, "--")) {
      std::string name = token.substr(2);
      std::string value;
      bool inlineValue = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inlineValue = true;
      }
      const OptionSpec* option = nullptr;
      for (const auto& candidate : spec.options) {
        if (candidate.name == name) option = &candidate;
      }
      if (option == nullptr) {
        std::vector<std::string> names;
        for (const auto& candidate : spec.options)
          names.push_back(candidate.name);
        std::string suggestion = closestOf(name, names);
        throw ConfigError("megabatch " + spec.name + ": unknown option --" + name,
                          suggestion.empty() ? "see megabatch " + spec.name + " --help"
                                             : "did you mean --" + suggestion + "?");
      }
      if (!option->takesValue) {
        if (inlineValue) throw ConfigError("option --" + name + " takes no value");
        args.flags.insert(name);
        continue;
      }
      if (!inlineValue) {
        if (i + 1 >= argc)
          throw ConfigError("option --" + name + " needs a value", "usage: " + spec.usage);
        value = argv[++i];
      }
      args.values[name] = value;
    } else if (spec.takesPositionals) {
      args.positionals.push_back(token);
    } else {
      throw ConfigError("megabatch " + spec.name + ": unexpected argument '" + token + "'",
                        "usage: " + spec.usage);
    }
  }
  return args;
}

int reportError(const Error& error) {
  auto& logger = log::get("app");
  logger.error("{}", error.message());
  if (!error.hint().empty()) logger.error("hint: {}", error.hint());
  log::flush();
  return static_cast<int>(error.code());
}

}  // namespace

std::string ParsedArgs::get(const std::string& name, const std::string& fallback) const {
  auto it = values.find(name);
  return it == values.end() ? fallback : it->second;
}

double ParsedArgs::getDouble(const std::string& name, double fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  try {
    std::size_t used = 0;
    double value = std::stod(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  throw ConfigError("--" + name + ": expected a number, got '" + it->second + "'");
}

long ParsedArgs::getInt(const std::string& name, long fallback) const {
  auto it = values.find(name);
  if (it == values.end()) return fallback;
  try {
    std::size_t used = 0;
    long value = std::stol(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  throw ConfigError("--" + name + ": expected an integer, got '" + it->second + "'");
}

int main(int argc, char** argv) {
  dist::takeOpenMpWaitChoice();  // before any thread starts: it edits the environment
  keepFreedHostMemory();
  model::handKindsToConfig();
  if (argc < 2) {
    printUsage(stderr);
    return static_cast<int>(ExitCode::kUsage);
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    printUsage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("megabatch %s (LibTorch %s%s)\n", MEGABATCH_VERSION, compat::torchVersion().c_str(),
                train::cudaBuildDescription().c_str());
    return 0;
  }
  const CommandSpec* spec = findCommand(name);
  if (spec == nullptr) {
    std::vector<std::string> names;
    for (const auto& candidate : commands())
      names.push_back(candidate.name);
    std::string suggestion = closestOf(name, names);
    return reportError(ConfigError("unknown command '" + name + "'",
                                   suggestion.empty()
                                       ? "run megabatch --help"
                                       : "did you mean megabatch " + suggestion + "?"));
  }
  for (int i = 2; i < argc; ++i) {
    std::string token = argv[i];
    if (token == "--help" || token == "-h") {
      printCommandHelp(*spec);
      return 0;
    }
  }

  // Command-line errors are the same on every rank: report them before MPI starts.
  ParsedArgs args;
  try {
    args = parseCommandLine(*spec, argc, argv, 2);
  } catch (const Error& error) {
    return reportError(error);
  }
  // Training records SIGTERM/SIGUSR1/SIGINT from the very start, so a preemption signal that
  // arrives during start-up still ends in a checkpoint and exit 75, not a killed rank.
  if (spec->name == "train" || spec->name == "walk") train::installStopSignalHandlers();
  std::unique_ptr<dist::Runtime> runtime;
  try {
    runtime = std::make_unique<dist::Runtime>(&argc, &argv);
    return spec->run(args, *runtime);
  } catch (const Error& error) {
    int code = reportError(error);
    // An error every rank agreed on (or a world of one) exits normally on every rank; any
    // other error must take the whole job down, or peers would wait in their next collective.
    if (runtime && runtime->size() > 1 && !error.agreed()) runtime->abortJob(code);
    return code;
  } catch (const std::exception& e) {
    // Note [Out of memory is an expected error]: a message with remedies, not a stack trace.
    std::optional<Error> oom = explainOutOfMemory(e);
    int code = reportError(oom ? *oom : RuntimeError(std::string("unexpected error: ") + e.what()));
    if (runtime && runtime->size() > 1) runtime->abortJob(code);
    return code;
  }
}

}  // namespace mb::app
