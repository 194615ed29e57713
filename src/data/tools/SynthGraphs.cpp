// megabatch data synth-graphs: Note [Synthetic graphs] in Tools.h.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/Error.h"
#include "common/WorkProgress.h"
#include "data/pipeline/GlobalOrder.h"
#include "data/tools/GraphArrays.h"
#include "data/tools/Random.h"
#include "data/tools/Tools.h"

namespace mb::data {

namespace {

const char* const kMotifNames[] = {"path", "cycle", "house"};

void validate(const SynthGraphsOptions& o) {
  if (o.out.empty()) throw ConfigError("megabatch data synth-graphs needs --out FILE.h5");
  if (o.graphs < 1) throw ConfigError("--graphs must be >= 1");
  if (o.minNodes < 6 || o.maxNodes < o.minNodes)
    throw ConfigError(
        "--min-nodes must be >= 6 (a tree node plus the 5-node motif) and "
        "--max-nodes >= --min-nodes");
  if (o.nodeTypes < 1 || o.nodeTypes > 26) throw ConfigError("--node-types must be 1..26");
  if (o.features < 0) throw ConfigError("--features must be >= 0");
}

// One graph of Note [Synthetic graphs]: appended to `a` with class `motif`.
void synthGraph(GraphArrays& a, std::int64_t motif, const SynthGraphsOptions& o, Rng& rng) {
  const std::int64_t n = o.minNodes + rng.below(o.maxNodes - o.minNodes + 1);
  const std::int64_t tree = n - 5;
  std::vector<std::pair<std::int64_t, std::int64_t>> edges;
  for (std::int64_t i = 1; i < tree; ++i)
    edges.emplace_back(rng.below(i), i);
  const std::int64_t m = tree;  // motif nodes m .. m+4
  for (std::int64_t k = 0; k < 4; ++k)
    edges.emplace_back(m + k, m + k + 1);
  if (motif >= 1) edges.emplace_back(m + 4, m);           // closes the 5-cycle
  if (motif == 2) edges.emplace_back(m, m + 2);           // the chord: a triangle on a square
  edges.emplace_back(rng.below(tree), m + rng.below(5));  // joins the motif to the tree
  std::vector<std::int64_t> relabel(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    relabel[i] = i;
  seededShuffle(relabel, rng.next());
  a.nodeOffsets.push_back(a.nodeOffsets.back() + n);
  for (std::int64_t i = 0; i < n; ++i) {
    a.types.push_back(static_cast<std::int32_t>(rng.below(o.nodeTypes)));
    for (std::int64_t f = 0; f < o.features; ++f)
      a.features.push_back(static_cast<float>(rng.normal()));
  }
  for (const auto& [s, t] : edges) {
    a.sources.push_back(relabel[s]);
    a.targets.push_back(relabel[t]);
    a.sources.push_back(relabel[t]);
    a.targets.push_back(relabel[s]);
  }
  a.edgeOffsets.push_back(a.edgeOffsets.back() + 2 * static_cast<std::int64_t>(edges.size()));
  a.classes.push_back(motif);
}

std::string jsonString(const std::string& text) {
  return "\"" + text + "\"";  // ids and names here are plain ASCII
}

// DIR/graphs.jsonl and DIR/labels.jsonl: the same graphs in the converter's input format.
void writeJsonl(const std::string& dir, const GraphArrays& a) {
  std::filesystem::create_directories(dir);
  std::ofstream graphs(dir + "/graphs.jsonl"), labels(dir + "/labels.jsonl");
  char number[32];
  for (std::int64_t g = 0; g < a.graphs(); ++g) {
    graphs << "{\"id\": " << jsonString(a.ids[g]) << ", \"node_types\": [";
    for (std::int64_t i = a.nodeOffsets[g]; i < a.nodeOffsets[g + 1]; ++i)
      graphs << (i > a.nodeOffsets[g] ? ", " : "") << jsonString(a.typeNames[a.types[i]]);
    graphs << "]";
    if (a.featureWidth > 0) {
      graphs << ", \"node_features\": [";
      for (std::int64_t i = a.nodeOffsets[g]; i < a.nodeOffsets[g + 1]; ++i) {
        graphs << (i > a.nodeOffsets[g] ? ", [" : "[");
        for (std::int64_t f = 0; f < a.featureWidth; ++f) {
          std::snprintf(number, sizeof(number), "%.9g", a.features[i * a.featureWidth + f]);
          graphs << (f ? ", " : "") << number;
        }
        graphs << "]";
      }
      graphs << "]";
    }
    graphs << ", \"edges\": [";
    for (std::int64_t e = a.edgeOffsets[g]; e < a.edgeOffsets[g + 1]; ++e)
      graphs << (e > a.edgeOffsets[g] ? ", [" : "[") << a.sources[e] << ", " << a.targets[e] << "]";
    graphs << "]}\n";
    labels << "{\"id\": " << jsonString(a.ids[g])
           << ", \"label\": " << jsonString(a.classNames[a.classes[g]]) << "}\n";
  }
  if (!graphs || !labels)
    throw RuntimeError("cannot write " + dir + "/graphs.jsonl or labels.jsonl");
}

}  // namespace

GraphsReport writeSynthGraphs(const SynthGraphsOptions& o) {
  validate(o);
  Rng rng(o.seed);
  GraphArrays a;
  a.hasTypes = true;
  for (std::int64_t t = 0; t < o.nodeTypes; ++t)
    a.typeNames.push_back(std::string(1, static_cast<char>('A' + t)));
  a.featureWidth = o.features > 0 ? o.features : -1;
  a.classNames = {kMotifNames[0], kMotifNames[1], kMotifNames[2]};
  char id[32];
  WorkProgress::Options shown;
  shown.label = "data synth-graphs";
  shown.unit = "graphs";
  shown.total = o.graphs;
  shown.tag = "data";
  shown.startLine = "data synth-graphs: " + std::to_string(o.graphs) + " graphs of " +
                    std::to_string(o.minNodes) + "-" + std::to_string(o.maxNodes) + " nodes to " +
                    o.out;
  WorkProgress progress(shown);
  for (std::int64_t g = 0; g < o.graphs; ++g) {
    synthGraph(a, rng.below(3), o, rng);
    std::snprintf(id, sizeof(id), "g%06lld", static_cast<long long>(g));
    a.ids.push_back(id);
    if ((g & 255) == 255 || g + 1 == o.graphs) progress.update(g + 1);
  }
  progress.finish();
  writeGraphsFile(
      o.out, a, o.write,
      {{"generator", "megabatch data synth-graphs"},
       {"task",
        "label = the 5-node motif joined to a random tree: 0 path, 1 5-cycle, 2 5-cycle with a "
        "chord (house); node counts, types and features are independent of the label"},
       {"seed", std::to_string(o.seed)}});
  if (!o.jsonlDir.empty()) writeJsonl(o.jsonlDir, a);
  GraphsReport report;
  fillReport(report, a);
  return report;
}

}  // namespace mb::data
