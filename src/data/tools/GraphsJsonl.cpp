// megabatch data graphs: JSON-lines graphs (and labels by id) to the `graphs` layout
// (data/layouts/GraphsLayout.h; docs/data-format.md "graphs").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "data/pipeline/GlobalOrder.h"
#include "data/tools/GraphArrays.h"
#include "data/tools/Json.h"
#include "data/tools/ToolOutput.h"
#include "data/tools/Tools.h"

namespace mb::data {
namespace {

constexpr const char* kSkipHint =
    "fix the line, or pass --skip-bad to skip bad lines (they are counted); the JSON-lines schema "
    "is in docs/data-format.md";

// A line that cannot become a graph or a label: why, in words.
struct BadLine : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --- parsing one graph -------------------------------------------------------------------

struct ParsedGraph {
  std::string id;
  std::int64_t nodes = 0;
  std::int64_t featureWidth = -1;
  std::vector<float> features;
  bool hasTypes = false;
  std::vector<std::string> types;
  std::vector<std::int64_t> sources, targets;
  std::int64_t edgeWidth = -1;
  std::vector<float> edgeFeatures;
  const json::Value* label = nullptr;  // inline label, if any (points into the line's tree)
};

std::string idText(const json::Value& id) {
  if (id.isString()) return id.text;
  if (id.isInteger()) return std::to_string(id.integer);
  throw BadLine("'id' must be a string or an integer, found " + id.describe());
}

const json::Value* member(const json::Value& object, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const json::Value* v = object.find(name)) return v;
  }
  return nullptr;
}

// A list of equal-length lists of finite numbers, appended to `out`; returns the width.
std::int64_t readMatrix(const json::Value& v, const std::string& name, std::vector<float>& out) {
  if (!v.isArray())
    throw BadLine("'" + name + "' must be a list of numeric lists, found " + v.describe());
  std::int64_t width = -1;
  for (std::size_t r = 0; r < v.items.size(); ++r) {
    const json::Value& row = v.items[r];
    std::string where = name + "[" + std::to_string(r) + "]";
    if (!row.isArray())
      throw BadLine(where + " must be a list of numbers, found " + row.describe());
    if (width < 0) width = static_cast<std::int64_t>(row.items.size());
    if (static_cast<std::int64_t>(row.items.size()) != width)
      throw BadLine(where + " has " + std::to_string(row.items.size()) + " values, but " + name +
                    "[0] has " + std::to_string(width));
    for (std::size_t c = 0; c < row.items.size(); ++c) {
      const json::Value& x = row.items[c];
      std::string cell = where + "[" + std::to_string(c) + "]";
      if (!x.isNumber()) throw BadLine(cell + " is " + x.describe() + ", expected a number");
      if (!std::isfinite(x.number))
        throw BadLine(cell + " is not finite (" + (std::isnan(x.number) ? "NaN" : "Infinity") +
                      ")");
      out.push_back(static_cast<float>(x.number));
    }
  }
  if (width == 0) throw BadLine("'" + name + "' rows are empty: give at least one value per row");
  return width;
}

std::int64_t localId(const json::Value& x, const std::string& where, std::int64_t nodes) {
  if (!x.isInteger())
    throw BadLine(where + " is " + x.describe() + ", expected an integer node id");
  if (x.integer < 0 || x.integer >= nodes)
    throw BadLine(where + " = " + std::to_string(x.integer) + ": the graph has " +
                  std::to_string(nodes) + " nodes (ids 0.." + std::to_string(nodes - 1) + ")");
  return x.integer;
}

void readEdges(const json::Value& object, ParsedGraph& g) {
  if (const json::Value* pairs = member(object, {"edges"})) {
    if (!pairs->isArray())
      throw BadLine("'edges' must be a list of [source, target] pairs, found " + pairs->describe());
    for (std::size_t e = 0; e < pairs->items.size(); ++e) {
      const json::Value& pair = pairs->items[e];
      std::string where = "edges[" + std::to_string(e) + "]";
      if (!pair.isArray() || pair.items.size() != 2)
        throw BadLine(where + " must be a [source, target] pair, found " + pair.describe());
      g.sources.push_back(localId(pair.items[0], where + "[0]", g.nodes));
      g.targets.push_back(localId(pair.items[1], where + "[1]", g.nodes));
    }
    return;
  }
  if (const json::Value* index = member(object, {"edge_index"})) {
    if (!index->isArray() || index->items.size() != 2 || !index->items[0].isArray() ||
        !index->items[1].isArray() || index->items[0].items.size() != index->items[1].items.size())
      throw BadLine("'edge_index' must be [[sources...], [targets...]] of equal length");
    for (std::size_t e = 0; e < index->items[0].items.size(); ++e) {
      std::string at = "[" + std::to_string(e) + "]";
      g.sources.push_back(localId(index->items[0].items[e], "edge_index[0]" + at, g.nodes));
      g.targets.push_back(localId(index->items[1].items[e], "edge_index[1]" + at, g.nodes));
    }
    return;
  }
  throw BadLine("'edges' is missing (a list of [source, target] pairs; [] for no edges)");
}

ParsedGraph parseGraph(const json::Value& object) {
  if (!object.isObject())
    throw BadLine("expected one JSON object per line, found " + object.describe());
  ParsedGraph g;
  const json::Value* id = object.find("id");
  if (id == nullptr) throw BadLine("'id' is missing");
  g.id = idText(*id);
  const json::Value* features = member(object, {"node_features", "nodes", "x"});
  const json::Value* types = member(object, {"node_types", "types"});
  if (features == nullptr && types == nullptr)
    throw BadLine(
        "the graph has no nodes: give 'node_features' (a list of numeric lists) or "
        "'node_types' (a list of type names)");
  if (features != nullptr) {
    g.featureWidth = readMatrix(*features, "node_features", g.features);
    g.nodes = static_cast<std::int64_t>(features->items.size());
  }
  if (types != nullptr) {
    if (!types->isArray())
      throw BadLine("'node_types' must be a list of type names, found " + types->describe());
    for (std::size_t i = 0; i < types->items.size(); ++i) {
      const json::Value& t = types->items[i];
      if (t.isString()) {
        g.types.push_back(t.text);
      } else if (t.isInteger()) {
        g.types.push_back(std::to_string(t.integer));
      } else {
        throw BadLine("node_types[" + std::to_string(i) + "] is " + t.describe() +
                      ", expected a type name (a string)");
      }
    }
    if (features != nullptr && g.types.size() != static_cast<std::size_t>(g.nodes))
      throw BadLine("'node_types' has " + std::to_string(g.types.size()) +
                    " entries but 'node_features' has " + std::to_string(g.nodes) + " rows");
    g.hasTypes = true;
    g.nodes = static_cast<std::int64_t>(g.types.size());
  }
  if (g.nodes == 0) throw BadLine("the graph has no nodes (its node list is empty)");
  readEdges(object, g);
  if (const json::Value* edgeFeatures = member(object, {"edge_features", "edge_attr"})) {
    g.edgeWidth = readMatrix(*edgeFeatures, "edge_features", g.edgeFeatures);
    if (edgeFeatures->items.size() != g.sources.size())
      throw BadLine("'edge_features' has " + std::to_string(edgeFeatures->items.size()) +
                    " rows, but the graph has " + std::to_string(g.sources.size()) + " edges");
  }
  g.label = object.find("label");
  return g;
}

// --- labels --------------------------------------------------------------------------------

struct LabelLine {
  std::string file;
  std::int64_t line = 0;
  json::Value value;
};

enum class LabelKind { kClass, kName, kNumber, kVector };

LabelKind kindOf(const json::Value& v) {
  if (v.isInteger()) return LabelKind::kClass;
  if (v.isString()) return LabelKind::kName;
  if (v.isNumber()) return LabelKind::kNumber;
  if (v.isArray()) return LabelKind::kVector;
  throw BadLine("'label' is " + v.describe() +
                ": expected a class (0, 1, ... or a name) or numbers (regression)");
}

// --- reading JSON lines ---------------------------------------------------------------------

class LineReader {
 public:
  LineReader(const std::string& path, bool skipBad, GraphsReport& report)
      : path_(path), skipBad_(skipBad), report_(report), in_(path, std::ios::binary) {
    if (!in_)
      throw DataError(path + ": cannot read (no such file, or not readable)", "check the path");
  }

  // Calls visit(tree, line) for every non-blank line; a BadLine (or unreadable JSON) is
  // thrown as a DataError naming the line, or counted when skipping.
  template <class Visit>
  void forEach(Visit visit) {
    std::string text;
    std::int64_t line = 0;
    std::error_code error;
    WorkProgress::Options shown;
    shown.label = "data graphs";
    shown.counting = WorkProgress::Unit::kBytes;
    shown.total = static_cast<std::int64_t>(std::filesystem::file_size(path_, error));
    shown.speaks = !error;
    shown.tag = "data";
    shown.startLine = "data graphs: reading " + path_ + " (" +
                      str::humanBytes(static_cast<double>(shown.total)) + ")";
    WorkProgress progress(shown);
    std::int64_t bytes = 0;
    while (std::getline(in_, text)) {
      ++line;
      bytes += static_cast<std::int64_t>(text.size()) + 1;
      if ((line & 255) == 0) progress.update(bytes);
      if (!text.empty() && text.back() == '\r') text.pop_back();              // CRLF files
      if (line == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 BOM
      if (text.find_first_not_of(" \t") == std::string::npos) continue;
      try {
        json::Value tree;
        try {
          tree = json::parse(text);
        } catch (const json::ParseError& e) {
          throw BadLine("not valid JSON at column " + std::to_string(e.column()) + ": " + e.what());
        }
        visit(tree, line);
      } catch (const BadLine& bad) {
        reject(line, bad.what());
      }
    }
    if (in_.bad()) throw DataError(path_ + ": read failed after line " + std::to_string(line));
    progress.update(std::min(bytes, shown.total));
    progress.finish();
  }

  void reject(std::int64_t line, const std::string& reason) {
    std::string where = path_ + ":" + std::to_string(line) + ": " + reason;
    if (!skipBad_) throw DataError(where, kSkipHint);
    ++report_.skipped;
    if (report_.notes.size() < 5) report_.notes.push_back("skipped " + where);
  }

 private:
  std::string path_;
  bool skipBad_;
  GraphsReport& report_;
  std::ifstream in_;
};

// The graph's shape must match the first graph's: the same node inputs and widths.
void requireSameSchema(const ParsedGraph& g, const ParsedGraph& first, std::int64_t firstLine) {
  std::string ref = " (the first graph, line " + std::to_string(firstLine) + ", ";
  if ((g.featureWidth >= 0) != (first.featureWidth >= 0))
    throw BadLine(std::string(g.featureWidth >= 0 ? "has" : "lacks") + " 'node_features'" + ref +
                  (first.featureWidth >= 0 ? "has" : "lacks") +
                  " them): every graph needs the same node inputs");
  if (g.featureWidth != first.featureWidth)
    throw BadLine("node_features rows have " + std::to_string(g.featureWidth) + " values" + ref +
                  "has " + std::to_string(first.featureWidth) + ")");
  if (g.hasTypes != first.hasTypes)
    throw BadLine(std::string(g.hasTypes ? "has" : "lacks") + " 'node_types'" + ref +
                  (first.hasTypes ? "has" : "lacks") +
                  " them): every graph needs the same node inputs");
  if ((g.edgeWidth >= 0) != (first.edgeWidth >= 0) && !(g.sources.empty() && g.edgeWidth < 0))
    throw BadLine(std::string(g.edgeWidth >= 0 ? "has" : "lacks") + " 'edge_features'" + ref +
                  (first.edgeWidth >= 0 ? "has" : "lacks") + " them)");
  if (g.edgeWidth >= 0 && first.edgeWidth >= 0 && g.edgeWidth != first.edgeWidth)
    throw BadLine("edge_features rows have " + std::to_string(g.edgeWidth) + " values" + ref +
                  "has " + std::to_string(first.edgeWidth) + ")");
}

struct GraphLine {
  ParsedGraph graph;
  std::int64_t line = 0;
  std::optional<LabelLine> label;  // inline, or from the labels file
};

void appendGraph(GraphArrays& a, const ParsedGraph& g, std::map<std::string, std::int32_t>& vocab,
                 bool undirected) {
  a.ids.push_back(g.id);
  a.nodeOffsets.push_back(a.nodeOffsets.back() + g.nodes);
  a.featureWidth = g.featureWidth;
  a.features.insert(a.features.end(), g.features.begin(), g.features.end());
  a.hasTypes = g.hasTypes;
  for (const auto& name : g.types) {
    auto it = vocab.find(name);
    if (it == vocab.end()) {
      it = vocab.emplace(name, static_cast<std::int32_t>(a.typeNames.size())).first;
      a.typeNames.push_back(name);
    }
    a.types.push_back(it->second);
  }
  std::int64_t edges = 0;
  auto addEdge = [&](std::size_t e, bool reversed) {
    a.sources.push_back(reversed ? g.targets[e] : g.sources[e]);
    a.targets.push_back(reversed ? g.sources[e] : g.targets[e]);
    if (g.edgeWidth > 0) {
      auto row = g.edgeFeatures.begin() + static_cast<std::ptrdiff_t>(e * g.edgeWidth);
      a.edgeFeatures.insert(a.edgeFeatures.end(), row, row + g.edgeWidth);
    }
    ++edges;
  };
  for (std::size_t e = 0; e < g.sources.size(); ++e)
    addEdge(e, false);
  if (undirected) {
    for (std::size_t e = 0; e < g.sources.size(); ++e) {
      if (g.sources[e] != g.targets[e]) addEdge(e, true);
    }
  }
  if (g.edgeWidth > 0) a.edgeWidth = g.edgeWidth;
  a.edgeOffsets.push_back(a.edgeOffsets.back() + edges);
}

// One graph's label as a class (`names`: the sorted class names when labels are names).
std::int64_t classOf(const json::Value& label, LabelKind kind, LabelKind firstKind,
                     const std::string& firstWhere, const std::vector<std::string>& names) {
  if (kind == LabelKind::kVector || kind == LabelKind::kNumber)
    throw BadLine("label is " + label.describe() +
                  ", but --task classification needs class numbers 0, 1, ... or names");
  if (kind != firstKind)
    throw BadLine(std::string("label is a ") + (kind == LabelKind::kName ? "name" : "number") +
                  ", but the first label (" + firstWhere + ") is a " +
                  (firstKind == LabelKind::kName ? "name" : "number") +
                  ": use class numbers 0, 1, ... or names throughout");
  if (kind == LabelKind::kName)
    return std::lower_bound(names.begin(), names.end(), label.text) - names.begin();
  if (label.integer < 0)
    throw BadLine("class label " + std::to_string(label.integer) +
                  " is negative (class labels are 0, 1, ... or names)");
  return label.integer;
}

// One graph's label as regression values (appended to `out`); returns K (0 for a number).
std::int64_t valuesOf(const json::Value& label, LabelKind kind, bool forced,
                      std::vector<float>& out) {
  if (kind == LabelKind::kName)
    throw BadLine("label \"" + label.text + "\" is a name, but the labels are numbers (" +
                  (forced ? "--task regression" : "some are not integers") + ")");
  if (kind == LabelKind::kVector) {
    json::Value rows;
    rows.type = json::Value::Type::kArray;
    rows.items = {label};
    return readMatrix(rows, "label", out);
  }
  if (!std::isfinite(label.number)) throw BadLine("label is not finite");
  out.push_back(static_cast<float>(label.number));
  return 0;
}

// Labels of the graphs in `kept` into `a`: classes (numbers or names) or regression values. A
// graph whose label is bad is rejected (an error, or skipped with --skip-bad) and dropped.
void assignLabels(GraphArrays& a, std::vector<GraphLine>& kept, const std::string& task,
                  std::map<std::string, LineReader*>& readers) {
  bool regression = task == "regression";
  std::vector<std::string> names;
  for (const auto& g : kept) {
    const json::Value& v = g.label->value;
    if (task == "auto" && (v.isArray() || (v.isNumber() && !v.isInteger()))) regression = true;
    if (v.isString()) names.push_back(v.text);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  a.classification = !regression;
  std::optional<LabelKind> firstKind;
  std::string firstFile;
  std::int64_t firstLine = 0;
  std::vector<GraphLine> good;
  for (auto& g : kept) {
    const LabelLine& label = *g.label;
    try {
      LabelKind kind = kindOf(label.value);
      if (!firstKind) {
        firstKind = kind;
        firstFile = label.file;
        firstLine = label.line;
      }
      const std::string firstWhere =
          (label.file == firstFile ? "line " : firstFile + ":") + std::to_string(firstLine);
      if (regression) {
        std::vector<float> row;
        std::int64_t width = valuesOf(label.value, kind, task == "regression", row);
        if (good.empty()) a.labelWidth = width;
        if (width != a.labelWidth)
          throw BadLine("label has " + std::to_string(width) + " values, but the first (" +
                        firstWhere + ") has " + std::to_string(a.labelWidth));
        a.values.insert(a.values.end(), row.begin(), row.end());
      } else {
        a.classes.push_back(classOf(label.value, kind, *firstKind, firstWhere, names));
      }
      good.push_back(std::move(g));
    } catch (const BadLine& bad) {
      readers.at(label.file)->reject(label.line, bad.what());
    }
  }
  if (!regression && firstKind == LabelKind::kName) a.classNames = names;
  kept = std::move(good);
}

}  // namespace

GraphsReport convertGraphsJsonl(const GraphsJsonlOptions& o) {
  if (o.graphs.empty() || o.out.empty())
    throw ConfigError("megabatch data graphs needs --graphs FILE.jsonl and --out FILE.h5",
                      "labels come from --labels FILE.jsonl or a \"label\" key on each graph");
  if (o.task != "auto" && o.task != "classification" && o.task != "regression")
    throw ConfigError("--task " + o.task + ": expected auto, classification, or regression");
  writeOptions(o.write);  // checks --compression before any work
  GraphsReport report;
  LineReader graphsReader(o.graphs, o.skipBad, report);
  std::vector<GraphLine> kept;
  std::map<std::string, std::int64_t> lineOfId;
  std::optional<GraphLine> first;
  graphsReader.forEach([&](const json::Value& tree, std::int64_t line) {
    GraphLine g{parseGraph(tree), line, std::nullopt};
    auto seen = lineOfId.find(g.graph.id);
    if (seen != lineOfId.end())
      throw BadLine("duplicate id \"" + g.graph.id + "\" (first on line " +
                    std::to_string(seen->second) + ")");
    if (first) requireSameSchema(g.graph, first->graph, first->line);
    if (g.graph.label != nullptr) g.label = LabelLine{o.graphs, line, *g.graph.label};
    g.graph.label = nullptr;  // the tree goes away after this line
    lineOfId.emplace(g.graph.id, line);
    if (!first) first = g;
    kept.push_back(std::move(g));
  });

  std::map<std::string, LineReader*> readers{{o.graphs, &graphsReader}};
  std::optional<LineReader> labelsReader;
  if (!o.labels.empty()) {
    labelsReader.emplace(o.labels, o.skipBad, report);
    readers[o.labels] = &*labelsReader;
    std::map<std::string, std::size_t> indexOf;
    for (std::size_t i = 0; i < kept.size(); ++i)
      indexOf[kept[i].graph.id] = i;
    std::map<std::string, std::int64_t> labelLineOfId;
    std::int64_t unknown = 0;
    labelsReader->forEach([&](const json::Value& tree, std::int64_t line) {
      if (!tree.isObject())
        throw BadLine("expected {\"id\": ..., \"label\": ...}, found " + tree.describe());
      const json::Value* id = tree.find("id");
      const json::Value* label = tree.find("label");
      if (id == nullptr) throw BadLine("'id' is missing");
      if (label == nullptr) throw BadLine("'label' is missing");
      std::string key = idText(*id);
      auto seen = labelLineOfId.find(key);
      if (seen != labelLineOfId.end())
        throw BadLine("a second label for id \"" + key + "\" (first on line " +
                      std::to_string(seen->second) + ")");
      labelLineOfId.emplace(key, line);
      kindOf(*label);
      auto graph = indexOf.find(key);
      if (graph == indexOf.end()) {
        ++unknown;
        return;
      }
      kept[graph->second].label = LabelLine{o.labels, line, *label};
    });
    if (unknown > 0)
      report.notes.push_back(std::to_string(unknown) + " label(s) in " + o.labels +
                             " name ids that are not in " + o.graphs + " (ignored)");
  }
  std::vector<GraphLine> labelled;
  for (auto& g : kept) {
    if (g.label) {
      labelled.push_back(std::move(g));
      continue;
    }
    graphsReader.reject(g.line, "graph \"" + g.graph.id + "\" has no label" +
                                    (o.labels.empty() ? " (no \"label\" key, and no --labels file)"
                                                      : " in " + o.labels));
  }
  GraphArrays arrays;
  assignLabels(arrays, labelled, o.task, readers);
  if (labelled.empty())
    throw DataError(
        o.graphs + ": no usable graph (" + std::to_string(report.skipped) + " bad line(s) skipped)",
        kSkipHint);
  std::map<std::string, std::int32_t> vocab;
  GraphArrays graphs;
  graphs.classification = arrays.classification;
  graphs.classes = arrays.classes;
  graphs.classNames = arrays.classNames;
  graphs.values = arrays.values;
  graphs.labelWidth = arrays.labelWidth;
  for (const auto& g : labelled)
    appendGraph(graphs, g.graph, vocab, o.undirected);
  if (o.shuffle) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(graphs.graphs()));
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<std::int64_t>(i);
    seededShuffle(order, o.seed);
    graphs = reorder(graphs, order);
  }
  writeGraphsFile(o.out, graphs, o.write,
                  {{"generator", "megabatch data graphs"},
                   {"source_graphs", o.graphs},
                   {"source_labels", o.labels},
                   {"edges", o.undirected ? "both directions (--undirected)" : "as given"}});
  fillReport(report, graphs);
  return report;
}

}  // namespace mb::data
