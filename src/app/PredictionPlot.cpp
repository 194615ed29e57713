// megabatch plot PREDICTIONS.h5: one PNG that shows at a glance whether a model is any good,
// drawn by matplotlib from the file `megabatch predict` writes (its datasets and attributes are
// listed at the top of src/train/Prediction.cpp).
//   regression (series, samples, graphs): predicted and actual smoothed over time, the rolling
//     IC, the mean target by prediction decile, and the cumulative return of trading the
//     prediction's sign against always-long
//   panel regression: the daily IC across the instruments present, with its cumulative sum,
//     and the cumulative mean target of each prediction quintile
//   classification: the confusion matrix and the calibration curve
// A walk-forward's file (/fold) gets a dashed line at each fold's first row on the time axes,
// labelled with its fold_names line, and the script prints "fold boundaries: NAME at TIME, ...".
#include <filesystem>
#include <mutex>
#include <string>

#include "app/PredictionPlot.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"

namespace mb::app {
namespace {

// Exits 3 when matplotlib or h5py is missing, 4 when the file holds what it cannot draw
// (shapes that disagree, no rows), 5 when h5py cannot read it; each says why on stderr.
const char* const kPredictionScript = R"PY(
import math, os, sys
try:
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("matplotlib is not installed: apt-get install python3-matplotlib\n")
    sys.exit(3)
try:
    import h5py
except ImportError:
    sys.stderr.write("h5py is not installed: apt-get install python3-h5py\n")
    sys.exit(3)

path, out = sys.argv[1], sys.argv[2]

def fail(message):
    sys.stderr.write("%s: %s\n" % (path, message))
    sys.exit(4)

def text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

names = ["predictions", "targets", "sample_index", "timestamps", "present", "probabilities", "fold"]
try:
    with h5py.File(path, "r") as f:
        if "predictions" not in f or "targets" not in f:
            fail("not a predictions file: it has no /predictions or /targets (megabatch predict "
                 "writes them)")
        data = {name: f[name][()] for name in names if name in f}
        attrs = {key: text(value) for key, value in f.attrs.items()}
except OSError as error:
    sys.stderr.write("%s: cannot read it: %s\n" % (path, error))
    sys.exit(5)

pred, target = data["predictions"], data["targets"]
rows = pred.shape[0] if pred.ndim else 0
if rows == 0:
    fail("/predictions holds no rows")
if target.shape[0] != rows:
    fail("/predictions has %d rows but /targets %d" % (rows, target.shape[0]))
task = attrs.get("task") or ("classification" if "probabilities" in data else "regression")
panel = attrs.get("layout") == "panel" or "present" in data

# --- the time axis: dates from /timestamps in the file's time_unit, else the sample index -----
def as_dates(stamps, unit):
    stamps = stamps.astype(np.int64)
    numpy_units = {"s": "s", "ms": "ms", "us": "us", "ns": "ns", "days": "D"}
    if unit in numpy_units:
        return stamps.astype("datetime64[%s]" % numpy_units[unit])
    if unit == "yyyymmdd":
        year, month, day = stamps // 10000, stamps // 100 % 100, stamps % 100
        if not ((month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)).all():
            return None
        months = (year - 1970).astype("datetime64[Y]").astype("datetime64[M]") + (month - 1)
        return months.astype("datetime64[D]") + (day - 1)
    return None

index = data.get("sample_index")
if index is None or index.shape[0] != rows:
    index = np.arange(rows)
dates = None
if "timestamps" in data and data["timestamps"].shape[0] == rows:
    dates = as_dates(data["timestamps"], attrs.get("time_unit", "s"))
if dates is not None:
    x, x_label = dates, "date (UTC)" if attrs.get("time_unit") in ("s", "ms", "us", "ns") else "date"
else:
    x, x_label = index, "sample (row of the data file)"

# --- a walk-forward's folds: a line at each fold's first row, named by fold_names -------------
fold_marks = []  # (x of the fold's first row, its name)
if "fold" in data and data["fold"].ndim == 1 and data["fold"].shape[0] == rows:
    fold_of = data["fold"].astype(np.int64)
    fold_names = attrs.get("fold_names", "").splitlines()
    numbers, firsts = np.unique(fold_of, return_index=True)
    for number, first in sorted(zip(numbers, firsts), key=lambda pair: pair[1]):
        name = fold_names[number] if 0 <= number < len(fold_names) else "fold %d" % number
        fold_marks.append((x[first], name))
    print("fold boundaries: " + ", ".join("%s at %s" % (name, str(at)[:19]) for at, name in fold_marks))

def mark_folds(axis, label=False):
    for at, name in fold_marks:
        axis.axvline(at, color="tab:brown", ls="--", lw=0.9, alpha=0.8)
        if label:
            axis.annotate(name, xy=(at, 0.98), xycoords=("data", "axes fraction"), rotation=90,
                          va="top", ha="left", fontsize=7, color="tab:brown")

def cut(values, rows_of):
    """`values` with NaN after each gap in the rows predicted (the embargo between splits), so
    that a line breaks there instead of crossing it."""
    values = np.array(values, dtype=np.float64)
    values[1:][np.diff(rows_of) > 1] = np.nan
    return values

def time_axis(axis, label=True):
    if dates is not None:
        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    if label:
        axis.set_xlabel(x_label)

# --- the title: the model, its step, the checkpoint, and what it predicted --------------------
def title():
    checkpoint = attrs.get("checkpoint", "?")
    parts = os.path.normpath(checkpoint).split(os.sep)
    short = os.sep.join(parts[-3:]) if len(parts) > 3 else checkpoint
    split = attrs.get("split", "?")
    if split == "period" or attrs.get("from") or attrs.get("to"):
        what = "period %s to %s" % (attrs.get("from") or "the start", attrs.get("to") or "the end")
    else:
        what = "%s split" % split if split != "all" else "all splits"
    if fold_marks:
        what += ", %d folds of a walk-forward" % len(fold_marks)
    return "%s %s at step %s, %s of %s (%d rows)\ncheckpoint %s" % (
        attrs.get("model", "model"), task, attrs.get("step", "?"), what,
        os.path.basename(attrs.get("data", "?")), rows, short)

no_grid = []  # twin axes and the confusion matrix: one grid per panel, none over the counts

def rolling_mean(values, window):
    sums = np.cumsum(np.concatenate([[0.0], values]))
    result = np.full(len(values), np.nan)
    result[window - 1:] = (sums[window:] - sums[:-window]) / window
    return result

def rolling_corr(a, b, window):
    ma, mb_ = rolling_mean(a, window), rolling_mean(b, window)
    cov = rolling_mean(a * b, window) - ma * mb_
    va = rolling_mean(a * a, window) - ma * ma
    vb = rolling_mean(b * b, window) - mb_ * mb_
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((va > 1e-300) & (vb > 1e-300), cov / np.sqrt(np.abs(va * vb)), np.nan)

def pearson(a, b):
    if len(a) < 3 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])

def first_target(values, per_row_dims):
    """The first target column of [M, K] (or [M, N, K] for a panel), and K."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim > per_row_dims:
        return values.reshape(values.shape[:per_row_dims] + (-1,))[..., 0], values.shape[-1]
    return values, 1

# --- regression over time (series, samples, graphs) -------------------------------------------
def draw_regression():
    p, k = first_target(pred, 1)
    t, _ = first_target(target, 1)
    if p.shape != t.shape:
        fail("/predictions %s and /targets %s do not match" % (pred.shape, target.shape))
    keep = np.isfinite(p) & np.isfinite(t)
    p, t, when, at = p[keep], t[keep], x[keep], index[keep]
    n = len(p)
    if n < 2:
        fail("fewer than 2 finite predictions")
    smooth = min(n, max(5, n // 50))
    ic_window = min(n, max(20, n // 20))
    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    (series_ax, ic_ax), (decile_ax, pnl_ax) = axes

    series_ax.plot(when, cut(rolling_mean(t, smooth), at), color="tab:gray", lw=1.2,
                   label="actual (mean of %d)" % smooth)
    p_line = cut(rolling_mean(p, smooth), at)
    ratio = np.nanstd(p_line) / max(np.nanstd(rolling_mean(t, smooth)), 1e-300)
    if 1 / 3 <= ratio <= 3:
        series_ax.plot(when, p_line, color="tab:blue", lw=1.2, label="predicted (mean of %d)" % smooth)
        series_ax.legend(loc="upper left", fontsize=8)
    else:  # a prediction shrunk towards the mean would be a flat line on the target's scale
        twin = series_ax.twinx()
        no_grid.append(twin)
        twin.plot(when, p_line, color="tab:blue", lw=1.2,
                  label="predicted (mean of %d), right axis" % smooth)
        twin.set_ylabel("predicted", color="tab:blue")
        lines = series_ax.get_lines() + twin.get_lines()
        series_ax.legend(lines, [l.get_label() for l in lines], loc="upper left", fontsize=8)
    series_ax.set_ylabel("target")
    series_ax.set_title("predicted and actual, rolling mean over %d rows" % smooth, fontsize=10)
    time_axis(series_ax)

    ic = pearson(p, t)
    ic_ax.plot(when, cut(rolling_corr(p, t, ic_window), at), color="tab:purple", lw=1.2,
               label="IC over %d rows" % ic_window)
    ic_ax.axhline(0, color="black", lw=0.8)
    ic_ax.axhline(ic, color="tab:purple", ls="--", lw=1, label="IC of all rows: %.3f" % ic)
    ic_ax.set_ylabel("Pearson corr(prediction, target)")
    ic_ax.set_title("rolling information coefficient (IC)", fontsize=10)
    ic_ax.legend(loc="upper left", fontsize=8)
    time_axis(ic_ax)

    bins = min(10, n)
    group = np.argsort(np.argsort(p, kind="stable"), kind="stable") * bins // n
    means = np.array([t[group == g].mean() for g in range(bins)])
    decile_ax.bar(np.arange(1, bins + 1), means,
                  color=["tab:green" if m >= 0 else "tab:red" for m in means])
    decile_ax.axhline(0, color="black", lw=0.8)
    decile_ax.axhline(t.mean(), color="tab:gray", ls="--", lw=1, label="mean target")
    decile_ax.set_xticks(np.arange(1, bins + 1))
    decile_ax.set_xlabel("prediction decile (1 = lowest predictions)")
    decile_ax.set_ylabel("mean target")
    decile_ax.set_title("mean target by prediction decile (a good model climbs to the right)",
                        fontsize=10)
    decile_ax.legend(loc="upper left", fontsize=8)

    pnl_ax.plot(when, cut(np.cumsum(np.sign(p) * t), at), color="tab:blue", lw=1.2,
                label="sign(prediction) x target")
    pnl_ax.plot(when, cut(np.cumsum(t), at), color="tab:gray", lw=1.2, label="always long (target)")
    pnl_ax.axhline(0, color="black", lw=0.8)
    pnl_ax.set_ylabel("cumulative sum")
    pnl_ax.set_title("trading the prediction's sign", fontsize=10)
    pnl_ax.legend(loc="upper left", fontsize=8)
    time_axis(pnl_ax)
    for axis in (series_ax, ic_ax, pnl_ax):
        mark_folds(axis, label=axis is series_ax)
    head = title()
    if k > 1:
        head += "; target 1 of %d drawn" % k
    return fig, head

# --- panel regression: per date, across the instruments present ------------------------------
def draw_panel():
    p, k = first_target(pred, 2)
    t, _ = first_target(target, 2)
    if p.ndim != 2 or p.shape != t.shape:
        fail("/predictions %s and /targets %s are not both [dates, instruments]"
             % (pred.shape, target.shape))
    present = data.get("present")
    present = np.ones(p.shape, bool) if present is None else present.astype(bool)
    if present.shape != p.shape:
        fail("/present %s does not match /predictions %s" % (present.shape, p.shape))
    present &= np.isfinite(p) & np.isfinite(t)
    count = present.sum(1)
    safe = np.maximum(count, 1)
    dp = np.where(present, p - np.where(present, p, 0).sum(1, keepdims=True) / safe[:, None], 0)
    dt = np.where(present, t - np.where(present, t, 0).sum(1, keepdims=True) / safe[:, None], 0)
    var = (dp * dp).sum(1) * (dt * dt).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ic = np.where((count >= 3) & (var > 0), (dp * dt).sum(1) / np.sqrt(var), np.nan)
    # Quintiles of each date's present instruments: rank among them (absent ones rank last).
    ranks = np.argsort(np.argsort(np.where(present, p, np.inf), 1, kind="stable"), 1, kind="stable")
    quintile = np.where(present, ranks * 5 // safe[:, None], -1)

    fig, (ic_ax, q_ax) = plt.subplots(2, 1, figsize=(13, 9), sharex=True)
    valid = np.isfinite(ic)
    width = max(0.5, min(3.0, 600.0 / max(rows, 1)))
    ic_ax.vlines(x[valid], 0, ic[valid], colors=np.where(ic[valid] >= 0, "tab:green", "tab:red"),
                 lw=width, alpha=0.7)
    ic_ax.axhline(0, color="black", lw=0.8)
    mean, spread = np.nanmean(ic), np.nanstd(ic)
    ic_ax.set_ylabel("daily IC (bars)")
    ir = " / std %.3f = IR %.2f" % (spread, mean / spread) if spread > 0 else ""
    ic_ax.set_title("daily IC across the instruments present: mean %.3f%s" % (mean, ir), fontsize=10)
    cumulative = ic_ax.twinx()
    no_grid.append(cumulative)
    cumulative.plot(x, cut(np.cumsum(np.where(valid, ic, 0)), index), color="tab:blue", lw=1.5)
    cumulative.set_ylabel("cumulative IC (line)", color="tab:blue")
    time_axis(ic_ax, label=False)

    colours = ["tab:red", "tab:orange", "tab:gray", "yellowgreen", "darkgreen"]
    for q in range(5):
        chosen = quintile == q
        n_q = chosen.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            daily = np.where(n_q > 0, np.where(chosen, t, 0).sum(1) / np.maximum(n_q, 1), 0)
        name = "Q%d" % (q + 1) + (" (lowest predictions)" if q == 0 else
                                  " (highest predictions)" if q == 4 else "")
        q_ax.plot(x, cut(np.cumsum(daily), index), color=colours[q], lw=1.5, label=name)
    q_ax.axhline(0, color="black", lw=0.8)
    q_ax.set_ylabel("cumulative mean target")
    q_ax.set_title("mean target of each prediction quintile per date, accumulated "
                   "(a good model fans out, Q5 on top)", fontsize=10)
    q_ax.legend(loc="upper left", fontsize=8)
    time_axis(q_ax)
    for axis in (ic_ax, q_ax):
        mark_folds(axis, label=axis is ic_ax)
    head = title()
    if k > 1:
        head += "; target 1 of %d drawn" % k
    return fig, head

# --- classification ---------------------------------------------------------------------------
def draw_classification():
    probs = data.get("probabilities")
    if probs is None:
        logits = pred - pred.max(-1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    classes = probs.shape[-1]
    labels = np.asarray(target).reshape(-1)
    probs = probs.reshape(-1, classes)
    if probs.shape[0] != labels.shape[0]:
        fail("/predictions %s and /targets %s do not match" % (pred.shape, target.shape))
    keep = (labels >= 0) & (labels < classes) & np.isfinite(probs).all(1)
    if "present" in data and data["present"].size == labels.size:
        keep &= data["present"].reshape(-1).astype(bool)
    probs, labels = probs[keep], labels[keep].astype(np.int64)
    if len(labels) == 0:
        fail("no row has a label in 0..%d" % (classes - 1))
    chosen = probs.argmax(1)
    matrix = np.zeros((classes, classes), np.int64)
    np.add.at(matrix, (labels, chosen), 1)
    accuracy = float((chosen == labels).mean())
    majority = float(np.bincount(labels, minlength=classes).max()) / len(labels)

    fig, (cm_ax, cal_ax) = plt.subplots(1, 2, figsize=(14, 6.5))
    image = cm_ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=cm_ax, fraction=0.046, pad=0.04)
    if classes <= 20:
        for i in range(classes):
            for j in range(classes):
                cm_ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=9,
                           color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    ticks = np.arange(classes) if classes <= 20 else np.linspace(0, classes - 1, 11).astype(int)
    cm_ax.set_xticks(ticks)
    cm_ax.set_yticks(ticks)
    cm_ax.set_xlabel("predicted class")
    cm_ax.set_ylabel("true class")
    cm_ax.set_title("confusion matrix: accuracy %.1f%% (most common class %.1f%%)"
                    % (100 * accuracy, 100 * majority), fontsize=10)

    if classes == 2:
        confidence, hit = probs[:, 1], labels == 1
        x_name, y_name = "predicted probability of class 1", "observed frequency of class 1"
    else:
        confidence, hit = probs.max(1), chosen == labels
        x_name, y_name = "confidence (probability of the predicted class)", "accuracy"
    edges = np.linspace(0, 1, 11)
    which = np.clip(np.digitize(confidence, edges) - 1, 0, 9)
    filled = [b for b in range(10) if (which == b).any()]
    mean_confidence = [confidence[which == b].mean() for b in filled]
    observed = [hit[which == b].mean() for b in filled]
    counts = np.bincount(which, minlength=10)
    share = cal_ax.twinx()
    no_grid.extend([cm_ax, share])
    share.bar((edges[:-1] + edges[1:]) / 2, counts / len(labels), width=0.09, color="tab:gray",
              alpha=0.25)
    share.set_ylabel("share of rows in the bin (grey bars)")
    share.set_ylim(0, max(1e-9, (counts / len(labels)).max()) * 3)
    cal_ax.set_zorder(share.get_zorder() + 1)
    cal_ax.patch.set_visible(False)
    cal_ax.plot([0, 1], [0, 1], color="black", ls="--", lw=1, label="perfectly calibrated")
    cal_ax.plot(mean_confidence, observed, "o-", color="tab:blue", lw=1.5, label="model (10 bins)")
    cal_ax.set_xlim(0, 1)
    cal_ax.set_ylim(-0.02, 1.02)
    cal_ax.set_xlabel(x_name)
    cal_ax.set_ylabel(y_name)
    cal_ax.set_title("calibration", fontsize=10)
    cal_ax.legend(loc="upper left", fontsize=8)
    return fig, title() + "; %d classes" % classes

if task == "classification":
    fig, head = draw_classification()
elif panel:
    fig, head = draw_panel()
else:
    fig, head = draw_regression()
for axis in fig.axes:
    if axis not in no_grid and axis.get_label() != "<colorbar>":
        axis.grid(alpha=0.3)
fig.suptitle(head, fontsize=11)
fig.tight_layout()
fig.savefig(out, dpi=90)
print(out)
)PY";

}  // namespace

void plotPredictions(const std::string& path, const std::string& out) {
  const std::string hint =
      "megabatch predict --checkpoint CKPT --data FILE --out P.h5 writes a predictions file; "
      "megabatch plot RUN_DIR draws a run's training curves";
  if (!std::filesystem::exists(path)) throw DataError(path + ": no such file", hint);
  if (!h5::isHdf5File(path))
    throw DataError(path + " is not an HDF5 file, so not a predictions file", hint);
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    h5::Handle file = h5::openFile(path, false, ExitCode::kData);
    for (const char* name : {"predictions", "targets"})
      if (!h5::isDataset(file.get(), name))
        throw DataError(path + " is not a predictions file: it has no /" + name + " dataset", hint);
  }
  const int status = runProcess({pythonInterpreter(), "-c", kPredictionScript, path, out});
  if (status == 3)
    throw RuntimeError(
        "megabatch plot needs matplotlib and h5py (the line above names the one "
        "missing)",
        "apt-get install python3-matplotlib python3-h5py (scripts/setup.sh does)");
  if (status == 4 || status == 5)
    throw DataError("megabatch plot: " + path + " cannot be drawn (the line above says why)", hint);
  if (status != 0)
    throw RuntimeError("megabatch plot: rendering " + out + " failed (exit " +
                       std::to_string(status) + ")");
  log::get("app").info("wrote {}", out);
}

}  // namespace mb::app
