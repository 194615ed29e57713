"""Writes a series file of the S&P 500 daily file's shape: about 5000 business days from
2000-01-03, two streams (d1: one row a day; w1: one row a week), the target the next day's
log return. Used by bench/walk/walk_vs_loop.py; the values are a random walk with a weak
planted signal, so folds train to something.

    /usr/bin/python3 bench/walk/sp_shaped.py --out data/sp-shaped.h5 [--days 5000]
"""
import argparse

import h5py
import numpy as np
import pandas as pd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--days", type=int, default=5000)
    parser.add_argument("--features", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    days = pd.bdate_range("2000-01-03", periods=args.days, tz="UTC")
    signal = rng.standard_normal(args.days)
    ret = 0.01 * rng.standard_normal(args.days) + 0.002 * np.roll(signal, 1)
    d1 = np.column_stack([ret, signal] + [rng.standard_normal(args.days)
                                          for _ in range(args.features - 2)]).astype("float32")
    week = np.asarray(days.to_period("W-SUN").astype("int64"))
    week_index = week - week[0]
    weeks = int(week_index[-1]) + 1
    w1 = np.zeros((weeks, args.features), "float32")
    for column in range(args.features):
        w1[:, column] = np.bincount(week_index, d1[:, column], weeks) / np.maximum(
            np.bincount(week_index, minlength=weeks), 1)
    t = np.arange(59 * 1 + 5 * 12, args.days - 1)  # windows fit; the target is the next day's
    with h5py.File(args.out, "w") as f:
        f["series/d1/values"] = d1
        f["series/w1/values"] = w1
        f["samples/end/d1"] = t
        f["samples/end/w1"] = week_index[t] - 1  # the last completed week: no look-ahead
        f["targets"] = ret[t + 1] * 100
        f["timestamps"] = days[t].asi8 // 10**9


if __name__ == "__main__":
    main()
