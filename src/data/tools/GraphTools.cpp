// megabatch data graphs / synth-graphs: graph datasets in the `graphs` layout
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
#include "data/pipeline/GlobalOrder.h"
#include "data/tools/Json.h"
#include "data/tools/Random.h"
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

// Everything the layout stores, built up graph by graph.
struct GraphArrays {
  std::vector<std::int64_t> nodeOffsets{0}, edgeOffsets{0};
  std::int64_t featureWidth = -1;  // F; -1: no /node_features
  std::vector<float> features;     // [N_nodes * F]
  bool hasTypes = false;
  std::vector<std::int32_t> types;             // [N_nodes]
  std::vector<std::string> typeNames;          // vocabulary: type id -> name
  std::vector<std::int64_t> sources, targets;  // [E] local ids
  std::int64_t edgeWidth = -1;                 // F_e; -1: no /edge_features
  std::vector<float> edgeFeatures;             // [E * F_e]
  std::vector<std::string> ids;                // [G]
  bool classification = true;
  std::vector<std::int64_t> classes;    // [G] (classification)
  std::vector<std::string> classNames;  // when labels were names
  std::int64_t labelWidth = 0;          // regression: 0 = [G], K = [G, K]
  std::vector<float> values;            // [G * max(K, 1)] (regression)

  std::int64_t graphs() const { return static_cast<std::int64_t>(ids.size()); }
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
    while (std::getline(in_, text)) {
      ++line;
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

// --- writing ------------------------------------------------------------------------------

template <class T>
at::Tensor tensorOf(const std::vector<T>& values, at::ScalarType type,
                    std::vector<std::int64_t> shape) {
  at::Tensor out = at::empty(shape, type);
  std::copy(values.begin(), values.end(), out.data_ptr<T>());
  return out;
}

void writeDatasets(hid_t file, const GraphArrays& a, const h5::WriteOptions& options) {
  constexpr ExitCode code = ExitCode::kFailure;
  const std::int64_t graphs = a.graphs();
  const std::int64_t nodes = a.nodeOffsets.back();
  const std::int64_t edges = a.edgeOffsets.back();
  h5::writeTensor(file, "node_offsets", tensorOf(a.nodeOffsets, at::kLong, {graphs + 1}), options,
                  code);
  h5::writeTensor(file, "edge_offsets", tensorOf(a.edgeOffsets, at::kLong, {graphs + 1}), options,
                  code);
  if (a.featureWidth > 0)
    h5::writeTensor(file, "node_features",
                    tensorOf(a.features, at::kFloat, {nodes, a.featureWidth}), options, code);
  if (a.hasTypes) {
    h5::writeTensor(file, "node_type", tensorOf(a.types, at::kInt, {nodes}), options, code);
    h5::Handle types = h5::openDataset(file, "node_type", code);
    h5::writeAttribute(types.get(), "vocab_size", static_cast<std::int64_t>(a.typeNames.size()),
                       code);
    h5::writeTensor(file, "node_type_names", textRows(a.typeNames), {}, code);
  }
  std::vector<std::int64_t> index(a.sources);
  index.insert(index.end(), a.targets.begin(), a.targets.end());
  h5::writeTensor(file, "edge_index", tensorOf(index, at::kLong, {2, edges}), options, code);
  if (a.edgeWidth > 0)
    h5::writeTensor(file, "edge_features",
                    tensorOf(a.edgeFeatures, at::kFloat, {edges, a.edgeWidth}), options, code);
  if (a.classification) {
    h5::writeTensor(file, "label", tensorOf(a.classes, at::kLong, {graphs}), options, code);
    if (!a.classNames.empty())
      h5::writeTensor(file, "label_names", textRows(a.classNames), {}, code);
  } else {
    std::vector<std::int64_t> shape{graphs};
    if (a.labelWidth > 0) shape.push_back(a.labelWidth);
    h5::writeTensor(file, "label", tensorOf(a.values, at::kFloat, shape), options, code);
  }
  h5::writeTensor(file, "graph_id", textRows(a.ids), options, code);
  h5::writeAttribute(file, "layout", std::string("graphs"), code);
}

// Writes `out` through OUT.tmp and a rename: a failure leaves no file (nothing half written).
void writeGraphsFile(const std::string& out, const GraphArrays& a, const WriteSettings& write,
                     const std::vector<std::pair<std::string, std::string>>& attributes) {
  const std::string tmp = out + ".tmp";
  try {
    constexpr ExitCode code = ExitCode::kFailure;
    h5::Handle file = h5::createFile(tmp, false, code);
    writeDatasets(file.get(), a, writeOptions(write));
    for (const auto& [name, value] : attributes)
      h5::writeAttribute(file.get(), name, value, code);
    file.close(code, tmp);
    std::filesystem::rename(tmp, out);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

void fillReport(GraphsReport& report, const GraphArrays& a) {
  report.graphs = a.graphs();
  report.nodes = a.nodeOffsets.back();
  report.edges = a.edgeOffsets.back();
  report.nodeFeatures = std::max<std::int64_t>(0, a.featureWidth);
  report.nodeTypes = static_cast<std::int64_t>(a.typeNames.size());
  report.edgeFeatures = std::max<std::int64_t>(0, a.edgeWidth);
  report.task = a.classification ? "classification" : "regression";
  if (a.classification) {
    for (std::int64_t c : a.classes) {
      if (c >= static_cast<std::int64_t>(report.classCounts.size()))
        report.classCounts.resize(static_cast<std::size_t>(c + 1), 0);
      ++report.classCounts[c];
    }
  }
  report.classNames = a.classNames;
}

GraphArrays reorder(const GraphArrays& a, const std::vector<std::int64_t>& order);

}  // namespace

std::string GraphsReport::summary() const {
  std::ostringstream text;
  text << graphs << " graphs, " << nodes << " nodes, " << edges << " edges; node inputs: ";
  if (nodeFeatures > 0) text << nodeFeatures << " features";
  if (nodeFeatures > 0 && nodeTypes > 0) text << " + ";
  if (nodeTypes > 0) text << nodeTypes << " node types";
  if (edgeFeatures > 0) text << "; " << edgeFeatures << " edge features";
  text << "; " << task;
  if (!classCounts.empty()) {
    text << ", graphs per class:";
    for (std::size_t c = 0; c < classCounts.size(); ++c)
      text << " " << c << (c < classNames.size() ? "=" + classNames[c] : "") << ": "
           << classCounts[c];
  }
  if (skipped > 0) text << "\nskipped " << skipped << " bad line(s) (--skip-bad)";
  for (const auto& note : notes)
    text << "\n  " << note;
  return text.str();
}

namespace {

GraphArrays reorder(const GraphArrays& a, const std::vector<std::int64_t>& order) {
  GraphArrays b;
  b.featureWidth = a.featureWidth;
  b.hasTypes = a.hasTypes;
  b.typeNames = a.typeNames;
  b.edgeWidth = a.edgeWidth;
  b.classification = a.classification;
  b.classNames = a.classNames;
  b.labelWidth = a.labelWidth;
  const std::int64_t labelValues = std::max<std::int64_t>(a.labelWidth, 1);
  for (std::int64_t g : order) {
    b.ids.push_back(a.ids[g]);
    const std::int64_t n0 = a.nodeOffsets[g], n1 = a.nodeOffsets[g + 1];
    const std::int64_t e0 = a.edgeOffsets[g], e1 = a.edgeOffsets[g + 1];
    b.nodeOffsets.push_back(b.nodeOffsets.back() + n1 - n0);
    b.edgeOffsets.push_back(b.edgeOffsets.back() + e1 - e0);
    if (a.featureWidth > 0)
      b.features.insert(b.features.end(), a.features.begin() + n0 * a.featureWidth,
                        a.features.begin() + n1 * a.featureWidth);
    if (a.hasTypes) b.types.insert(b.types.end(), a.types.begin() + n0, a.types.begin() + n1);
    b.sources.insert(b.sources.end(), a.sources.begin() + e0, a.sources.begin() + e1);
    b.targets.insert(b.targets.end(), a.targets.begin() + e0, a.targets.begin() + e1);
    if (a.edgeWidth > 0)
      b.edgeFeatures.insert(b.edgeFeatures.end(), a.edgeFeatures.begin() + e0 * a.edgeWidth,
                            a.edgeFeatures.begin() + e1 * a.edgeWidth);
    if (a.classification) {
      b.classes.push_back(a.classes[g]);
    } else {
      b.values.insert(b.values.end(), a.values.begin() + g * labelValues,
                      a.values.begin() + (g + 1) * labelValues);
    }
  }
  return b;
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

// --- synth-graphs ---------------------------------------------------------------------------

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
  for (std::int64_t g = 0; g < o.graphs; ++g) {
    synthGraph(a, rng.below(3), o, rng);
    std::snprintf(id, sizeof(id), "g%06lld", static_cast<long long>(g));
    a.ids.push_back(id);
  }
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
