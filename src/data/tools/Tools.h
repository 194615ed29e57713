#pragma once
// Dataset tools behind `megabatch data ...` (docs/data-format.md "Tools"). Each writes one
// HDF5 file in a layout ShardedData loads, with attributes that describe how it was made.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mb::data {

// Shared output options.
struct WriteSettings {
  std::int64_t chunkRows = 0;        // 0 = contiguous datasets (unless compressed)
  std::string compression = "none";  // none | gzip
};

// --- synth-series -----------------------------------------------------------------------

// Note [Synthetic series]
// A latent process on a sub-minute grid (4 sub-steps per finest row):
//   level  L: Ornstein-Uhlenbeck, stationary std 0.5, time constant 1000 rows
//   amp    A = exp(a), a Ornstein-Uhlenbeck, std 0.3, time constant 2000 rows
//   phase  theta: advances 2*pi/32 per row, plus a small random walk (the "noise" knob)
//   price  x = L + A sin(theta) + observation noise (0.05 x noise)
// The finest stream's row t aggregates its sub-steps into [close, mean, high, low]; a stream
// of period p aggregates p finest rows the same way (close of the last, mean of means, max of
// highs, min of lows). Features beyond 4 are independent N(0, 1) noise columns.
// Sample i is finest row t_i = (largest period - 1) + i, so every stream has a completed
// bar; its end row in a stream of period p is (t_i + 1) / p - 1 (completed bars only: no
// look-ahead). Target k is the finest close at t_i + horizon * (k + 1).
// The oscillation makes the target predictable from the recent window (a quarter period
// ahead at the default horizon 8), which neither the last value (x_t) nor the mean can use.
// The oracle knows the latent state: E[target] = L e^{-h/tau_L} + A e^{-var/2} sin(theta + omega
// h).
struct SynthSeriesOptions {
  std::string out;
  std::int64_t rows = 100000;  // finest-stream rows
  std::int64_t features = 4;
  std::vector<std::pair<std::string, std::int64_t>> streams{
      {"m1", 1}, {"m5", 5}, {"m15", 15}, {"h1", 60}, {"h4", 240}};
  std::int64_t targets = 1;       // target columns ([N] when 1, else [N, K])
  std::int64_t horizon = 8;       // finest rows ahead of target 0
  double noise = 1.0;             // scales observation and phase noise
  std::string dtype = "float32";  // of the stream values: float16 | float32 | float64
  std::uint64_t seed = 1;
  WriteSettings write;
};

struct SynthSeriesReport {
  std::int64_t samples = 0;
  std::int64_t valBegin = 0, valEnd = 0;  // [0.8N, 0.9N): the val split of the default fractions
  double meanMse = 0;                     // predict the train-part mean
  double lastValueMse = 0;                // predict the last finest close
  double oracleMse = 0;                   // knows the latent state
  std::string summary() const;
};

// Parses "m1:1,m5:5,h1:60". Throws ConfigError.
std::vector<std::pair<std::string, std::int64_t>> parseStreams(const std::string& text);
SynthSeriesReport writeSynthSeries(const SynthSeriesOptions& options);

// --- synth-panel ------------------------------------------------------------------------

// Note [Synthetic panel]
// T dates x N instruments in S sectors (instrument i is in sector i mod S). Each date t:
//   market    m_t ~ N(0, 1)                                  i.i.d.
//   sector    s_k,t ~ N(0, sector_vol^2)                     i.i.d. per sector
//   signal    z_i,t: AR(1), coefficient 0.95, unit variance  per instrument
//   peers     p_k,t = sum of z_j,t over sector k / sqrt(n_k)  (unit variance)
//   return    r_i,t+1 = beta_i m_t+1 + gamma_i s_k,t+1 + own z_i,t + peer p_k(i),t + e_i,t+1,
//             e ~ N(0, 1), beta_i ~ U(0.5, 1.5), gamma_i ~ U(0.5, 1.5)
// Features of (t, i): [0] the return r_i,t, [1] z_i,t + N(0, 0.5^2) (the instrument's noisy
// signal), [2..F) N(0, 1) noise. The target is r_i,t+1. The expected return mixes the
// instrument's own signal with its sector's: a model that sees one instrument at a time can
// use the first term only; the sector's members are visible through the returns they share
// (gamma s), so a graph by return correlation finds them and can average their signals.
// Missing data: a tenth of the instruments list late (absent before a date in the first half of
// the panel), and every instrument is absent on 2% of the dates; absent entries hold NaN and
// mask 0. The last date's target (a return after the panel) is unknown: its mask is 0.
// The report gives the daily IC (Pearson and rank, mean over the val dates [0.8T, 0.9T)) of
// the oracle (own z_i,t + p_k,t, the expected return), of the own-signal oracle (own z_i,t
// alone: the best a per-instrument model can do with the exact signal), and of the
// cross-sectional mean (a constant per date: 0).
struct SynthPanelOptions {
  std::string out;
  std::int64_t dates = 1500;
  std::int64_t instruments = 200;
  std::int64_t features = 8;
  std::int64_t sectors = 10;
  std::int64_t targets = 1;       // K > 1: target k is the return k+1 dates ahead
  double own = 0.15;              // weight of the instrument's own signal
  double peer = 0.35;             // weight of its sector's signal
  double sectorVol = 0.7;         // std of the sector returns
  double missing = 0.02;          // share of absent instrument-dates
  std::string dtype = "float32";  // of /values: float16 | float32 | float64
  std::uint64_t seed = 1;
  WriteSettings write;
};

struct SynthPanelReport {
  std::int64_t valBegin = 0, valEnd = 0;
  double oracleIc = 0, oracleRankIc = 0;
  double ownIc = 0, ownRankIc = 0;
  double presentShare = 0;  // of instrument-dates
  std::string summary() const;
};

SynthPanelReport writeSynthPanel(const SynthPanelOptions& options);

// --- arith ----------------------------------------------------------------------------------

// Arithmetic problems as ASCII byte tokens, one "a<op>b=c\n" per problem, operands of up to
// `digits` digits. '-' may give negative results; '/' is floor division with b >= 1.
// The held-out problems never appear in /tokens: /heldout/prompts [M, P] and /heldout/answers
// [M, A] hold them as NUL-padded ASCII rows ("12+34=", "46"), /heldout/ops [M] the operator.
struct ArithOptions {
  std::string out;
  std::int64_t digits = 2;
  std::string ops = "+-";
  std::int64_t problems = 200000;  // ~1.9 M tokens: long runs do not memorise the stream
  std::int64_t heldout = 1000;
  std::uint64_t seed = 1;
  WriteSettings write;
};
std::string writeArith(const ArithOptions& options);  // returns a summary line

// --- text -----------------------------------------------------------------------------------

// Any file's bytes as /tokens uint8 with vocab_size 256.
std::string writeTextTokens(const std::string& in, const std::string& out,
                            const WriteSettings& write);

// --- graphs ---------------------------------------------------------------------------------

// What a graph tool wrote (docs/data-format.md "graphs").
struct GraphsReport {
  std::int64_t graphs = 0, nodes = 0, edges = 0;
  std::int64_t nodeFeatures = 0, nodeTypes = 0, edgeFeatures = 0;  // F, vocabulary, F_e
  std::string task;                                                // classification | regression
  std::vector<std::int64_t> classCounts;  // classification: graphs per class
  std::vector<std::string> classNames;    // when labels were names
  std::int64_t skipped = 0;               // bad lines skipped (--skip-bad)
  std::vector<std::string> notes;         // the first skipped lines' reasons, warnings
  std::string summary() const;
};

// `megabatch data graphs`: JSON-lines graphs (and labels by id) to the graphs layout. The
// accepted schema is in docs/data-format.md ("JSON lines"). A bad line is a DataError naming
// file:line and the reason, unless skipBad (then it is counted and skipped). The file is
// written to OUT.tmp and renamed, so nothing is left half-written.
struct GraphsJsonlOptions {
  std::string graphs;  // one graph per line
  std::string labels;  // {"id": ..., "label": ...} per line; empty: each graph has "label"
  std::string out;
  bool skipBad = false;
  bool undirected = false;  // store every edge (s, d), s != d, also as (d, s)
  bool shuffle = false;     // write the graphs in a seeded random order (random splits)
  std::uint64_t seed = 1;
  std::string task = "auto";  // auto | classification | regression
  WriteSettings write;
};
GraphsReport convertGraphsJsonl(const GraphsJsonlOptions& options);

// Note [Synthetic graphs]
// `megabatch data synth-graphs`: graph classification whose label is structure alone. Each
// graph is a random tree of n - 5 nodes (node i joins a uniform earlier node), n uniform in
// [min_nodes, max_nodes], with a 5-node motif joined to a random tree node by one edge:
//   class 0 "path"  a path of 5 nodes (no cycle)
//   class 1 "cycle" a 5-cycle
//   class 2 "house" a 5-cycle with one chord (a triangle on a square)
// Node types (uniform over `node_types` names) and node features (N(0, 1)) are drawn
// independently of the class, node ids are shuffled, and every edge is stored both ways. So
// node counts, types and features say nothing about the label (a node-wise model is at chance,
// macro-F1 ~ 1/3); the cycle structure says everything.
struct SynthGraphsOptions {
  std::string out;
  std::int64_t graphs = 3000;
  std::int64_t minNodes = 10;
  std::int64_t maxNodes = 30;
  std::int64_t nodeTypes = 4;
  std::int64_t features = 2;
  std::uint64_t seed = 1;
  std::string jsonlDir;  // also write DIR/graphs.jsonl and DIR/labels.jsonl
  WriteSettings write;
};
GraphsReport writeSynthGraphs(const SynthGraphsOptions& options);

// --- inspect --------------------------------------------------------------------------------

// True for megabatch checkpoints (a /meta group): `megabatch inspect` hands those to the
// checkpoint code.
bool looksLikeCheckpoint(const std::string& path);
// Layout, datasets (shape, dtype, chunking, compression), time range, samples, attributes.
std::string describeDataFile(const std::string& path);

}  // namespace mb::data
