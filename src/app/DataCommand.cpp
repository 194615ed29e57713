// megabatch data synth-series | arith | text | graphs | synth-graphs | check (docs/data-format.md
// "Tools"). The writers run on rank 0 (inside dist::agreed, so an error there ends every rank);
// `check` is collective: it loads a dataset under a config exactly as training would.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>

#include <ATen/Context.h>
#include <ATen/Functions.h>

#include "app/Cli.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "data/tools/Tools.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"

namespace mb::app {
namespace {

const char* kSubcommands = "synth-series, synth-panel, arith, text, graphs, synth-graphs, or check";

void onRankZero(dist::Runtime& runtime, const std::string& phase,
                const std::function<void()>& body) {
  dist::agreed(runtime.control(), phase, [&] {
    if (runtime.rank() == 0) body();
  });
}

data::WriteSettings writeSettings(const ParsedArgs& args) {
  data::WriteSettings write;
  write.chunkRows = args.getInt("chunk-rows", 0);
  write.compression = args.get("compression", "none");
  return write;
}

std::uint64_t seedOf(const ParsedArgs& args) {
  return static_cast<std::uint64_t>(args.getInt("seed", 1));
}

int synthSeries(const ParsedArgs& args, dist::Runtime& runtime) {
  data::SynthSeriesOptions o;
  o.out = args.get("out");
  o.rows = args.getInt("rows", o.rows);
  o.features = args.getInt("features", o.features);
  if (args.has("streams")) o.streams = data::parseStreams(args.get("streams"));
  o.targets = args.getInt("targets", o.targets);
  o.horizon = args.getInt("horizon", o.horizon);
  o.noise = args.getDouble("noise", o.noise);
  o.dtype = args.get("dtype", o.dtype);
  o.seed = seedOf(args);
  o.write = writeSettings(args);
  onRankZero(runtime, "writing " + o.out, [&] {
    data::SynthSeriesReport report = data::writeSynthSeries(o);
    std::printf("wrote %s: series layout, %zu streams, %lld finest rows x %lld features\n%s\n",
                o.out.c_str(), o.streams.size(), static_cast<long long>(o.rows),
                static_cast<long long>(o.features), report.summary().c_str());
  });
  return 0;
}

int synthPanel(const ParsedArgs& args, dist::Runtime& runtime) {
  data::SynthPanelOptions o;
  o.out = args.get("out");
  o.dates = args.getInt("dates", o.dates);
  o.instruments = args.getInt("instruments", o.instruments);
  o.features = args.getInt("features", o.features);
  o.sectors = args.getInt("sectors", o.sectors);
  o.targets = args.getInt("targets", o.targets);
  o.own = args.getDouble("own", o.own);
  o.peer = args.getDouble("peer", o.peer);
  o.sectorVol = args.getDouble("sector-vol", o.sectorVol);
  o.missing = args.getDouble("missing", o.missing);
  o.dtype = args.get("dtype", o.dtype);
  o.seed = seedOf(args);
  o.write = writeSettings(args);
  onRankZero(runtime, "writing " + o.out, [&] {
    data::SynthPanelReport report = data::writeSynthPanel(o);
    std::printf(
        "wrote %s: panel layout, %lld dates x %lld instruments x %lld features, %lld "
        "sectors\n%s\n",
        o.out.c_str(), static_cast<long long>(o.dates), static_cast<long long>(o.instruments),
        static_cast<long long>(o.features), static_cast<long long>(o.sectors),
        report.summary().c_str());
  });
  return 0;
}

int arith(const ParsedArgs& args, dist::Runtime& runtime) {
  data::ArithOptions o;
  o.out = args.get("out");
  o.digits = args.getInt("digits", o.digits);
  o.ops = args.get("ops", o.ops);
  o.problems = args.getInt("problems", o.problems);
  o.heldout = args.getInt("heldout", o.heldout);
  o.seed = seedOf(args);
  o.write = writeSettings(args);
  onRankZero(runtime, "writing " + o.out,
             [&] { std::printf("wrote %s: %s\n", o.out.c_str(), data::writeArith(o).c_str()); });
  return 0;
}

int text(const ParsedArgs& args, dist::Runtime& runtime) {
  std::string in = args.get("in"), out = args.get("out");
  onRankZero(runtime, "writing " + out, [&] {
    std::printf("wrote %s: %s\n", out.c_str(),
                data::writeTextTokens(in, out, writeSettings(args)).c_str());
  });
  return 0;
}

int graphs(const ParsedArgs& args, dist::Runtime& runtime) {
  data::GraphsJsonlOptions o;
  o.graphs = args.get("graphs");
  o.labels = args.get("labels");
  o.out = args.get("out");
  o.skipBad = args.has("skip-bad");
  o.undirected = args.has("undirected");
  o.shuffle = args.has("shuffle");
  o.seed = seedOf(args);
  o.task = args.get("task", o.task);
  o.write = writeSettings(args);
  onRankZero(runtime, "writing " + o.out, [&] {
    data::GraphsReport report = data::convertGraphsJsonl(o);
    std::printf("wrote %s: graphs layout, %s\n", o.out.c_str(), report.summary().c_str());
  });
  return 0;
}

int synthGraphs(const ParsedArgs& args, dist::Runtime& runtime) {
  data::SynthGraphsOptions o;
  o.out = args.get("out");
  o.graphs = args.getInt("graphs", o.graphs);
  o.minNodes = args.getInt("min-nodes", o.minNodes);
  o.maxNodes = args.getInt("max-nodes", o.maxNodes);
  o.nodeTypes = args.getInt("node-types", o.nodeTypes);
  o.features = args.getInt("features", o.features);
  o.seed = seedOf(args);
  o.jsonlDir = args.get("jsonl");
  o.write = writeSettings(args);
  onRankZero(runtime, "writing " + o.out, [&] {
    data::GraphsReport report = data::writeSynthGraphs(o);
    std::printf(
        "wrote %s: graphs layout, %s\n%s", o.out.c_str(), report.summary().c_str(),
        o.jsonlDir.empty()
            ? ""
            : ("and " + o.jsonlDir + "/graphs.jsonl, " + o.jsonlDir + "/labels.jsonl\n").c_str());
  });
  return 0;
}

}  // namespace

int runDataCheck(const ParsedArgs& args, dist::Runtime& runtime);

int runData(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.positionals.empty())
    throw ConfigError("megabatch data needs a subcommand: " + std::string(kSubcommands),
                      "e.g. megabatch data synth-series --out data/demo.h5");
  const std::string& sub = args.positionals.front();
  bool extra = args.positionals.size() > 1;
  if (sub == "check") return runDataCheck(args, runtime);
  if (extra)
    throw ConfigError("megabatch data " + sub + ": unexpected argument '" + args.positionals[1] +
                      "'");
  if (sub == "synth-series") return synthSeries(args, runtime);
  if (sub == "synth-panel") return synthPanel(args, runtime);
  if (sub == "arith") return arith(args, runtime);
  if (sub == "text") return text(args, runtime);
  if (sub == "graphs") return graphs(args, runtime);
  if (sub == "synth-graphs") return synthGraphs(args, runtime);
  std::string best;
  std::size_t distance = 99;
  for (const char* name :
       {"synth-series", "synth-panel", "arith", "text", "graphs", "synth-graphs", "check"}) {
    if (str::editDistance(sub, name) < distance) {
      distance = str::editDistance(sub, name);
      best = name;
    }
  }
  throw ConfigError(
      "megabatch data: unknown subcommand '" + sub + "' (expected " + kSubcommands + ")",
      distance <= 3 ? "did you mean megabatch data " + best + "?" : "see megabatch data --help");
}

}  // namespace mb::app
