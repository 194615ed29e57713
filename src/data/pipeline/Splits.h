#pragma once
// Note [Splits and embargo]
// Splits are time-based over the usable samples [first, N) (first = the first sample whose
// window is complete in every stream; 0 outside the series layout):
//   cut1 = first + floor(n * train_fraction), cut2 = first + floor(n * (train_fraction +
//   val_fraction)) train = [first, cut1), val = [start(cut1), cut2), test = [start(cut2), N)
// where start(cut) skips the embargo: data.split.embargo samples after the cut, or with -1
// (the default) "one window", defined per layout so that no window straddles two splits
// (with data.horizon = h, also at least h samples after the previous split's last sample, whose
// target looks h samples ahead: pastTheHorizon):
//   series  : the first sample whose windows share no row, in any stream, with the windows of
//             the previous split's last sample (exact, from the end-row arrays);
//   samples : T samples for [N, T, F] features (consecutive samples are usually windows that
//             slide by one row), 0 for [N, F];
//   tokens  : 1 item (consecutive items share one token).
// An empty split is an error when its fraction is > 0 (the embargo or the file is too long
// for it); a fraction of 0 gives an empty split and no gap.
//
// Each rank holds a contiguous part of val and of test: rank r of W holds
// [b + r*n/W, b + (r+1)*n/W) of a split [b, b+n). Train parts follow the canonical shards
// (Note [Canonical global order]).
#include <array>
#include <cstdint>
#include <functional>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "data/pipeline/GlobalOrder.h"

namespace mb::data {

// Where the split after a cut may start: >= cut, given the previous split's last sample.
using NextStart = std::function<std::int64_t(std::int64_t previousLast, std::int64_t cut)>;

// Throws DataError when a split with a positive fraction ends up empty. `file` names the data
// file in messages.
std::array<SampleRange, 3> planSplits(SampleRange usable, const SplitConfig& split,
                                      const NextStart& nextStart, const std::string& file);

// A fixed gap of `gap` samples after each cut.
NextStart fixedGap(std::int64_t gap);
// `inner`, and past the targets of the previous split: its last sample's target describes the
// row `horizon` samples later (data.horizon), so the next split starts after that row and no
// train target is a val input or target. The default embargo with data.horizon set.
NextStart pastTheHorizon(std::int64_t horizon, NextStart inner);

// Rank r's contiguous part of an eval split.
SampleRange evalPart(SampleRange split, int rank, int worldSize);

// Rank r's train samples (whole canonical shards, in file numbering).
SampleRange trainPart(SampleRange trainSplit, const GlobalOrder& order, int rank, int worldSize);

}  // namespace mb::data
