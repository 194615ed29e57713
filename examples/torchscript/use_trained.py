"""Uses an archive that `megabatch export` wrote, in plain PyTorch: predicts the last samples of
a synth-series file and compares with their targets.

    /usr/bin/python3 examples/torchscript/use_trained.py data/tcn-trained.pt data/demo.h5

Windows are cut from the series exactly as megabatch cuts them (docs/data-format.md, `series`):
sample i of stream s is the `window` rows of /series/<s>/values that end at row
/samples/end/<s>[i].
"""
import sys

import h5py
import torch

STREAMS = {"m1": 60, "m5": 24, "h1": 12}  # data.streams of tcn.yaml


def windows(f, samples):
    inputs = []
    for name, window in STREAMS.items():
        values = torch.from_numpy(f["series/%s/values" % name][()]).float()
        ends = torch.from_numpy(f["samples/end/%s" % name][()])[samples]
        rows = ends.unsqueeze(1) + torch.arange(-window + 1, 1)  # [B, window]
        inputs.append(values[rows])                               # [B, window, F]
    return inputs


def main():
    archive, data = sys.argv[1], sys.argv[2]
    model = torch.jit.load(archive)
    model.eval()  # dropout off; the archive keeps the train/eval flag it was saved with
    with h5py.File(data, "r") as f:
        n = f["targets"].shape[0]
        samples = torch.arange(n - 8, n)
        targets = torch.from_numpy(f["targets"][()])[samples]
        with torch.no_grad():
            predictions = model(*windows(f, samples)).squeeze(1)
    for i, p, t in zip(samples.tolist(), predictions.tolist(), targets.tolist()):
        print("sample %d: predicted %+.4f, target %+.4f" % (i, p, t))
    print("MSE over these %d samples: %.4f" % (len(samples), float(((predictions - targets) ** 2).mean())))


if __name__ == "__main__":
    main()
