"""What every CPU benchmark of megabatch reports with its figures (docs/benchmarks.md, "How the
benchmarks are run"): the machine's load average (at the start, at the end, and the highest seen
between repeats), the thread settings, the library versions, the medians of per-repeat ratios,
and a raw JSON file under bench/results/. A run whose load average went above LOADED_ABOVE is
marked as loaded in its output and its JSON: load flatters megabatch (the Python baselines
suffer more from it), so such figures are not for reporting.

    import benchlib
    host = benchlib.Host(threads=1, binaries={"megabatch": "build/megabatch"})
    ... for each repeat: host.sample_load() ...
    benchlib.finish("gnn_bench", result, host, out=args.out)
"""
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RESULTS = os.path.join(ROOT, "bench", "results")
LOADED_ABOVE = 1.5  # one benchmark process keeps the 1-minute load average near 1


def loaded_above(threads):
    """The load average above which a run counts as loaded: a run that itself keeps `threads`
    cores busy (cores_split.py's 2 ranks x 1 thread or 1 rank x 2 threads) holds the load near
    `threads` on its own, so the margin of 0.5 is added to that, not to 1."""
    return LOADED_ABOVE + max(threads, 1) - 1
MIN_REPEATS = 5


def load_average():
    """(1, 5, 15)-minute load averages."""
    return tuple(round(x, 2) for x in os.getloadavg())


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def python_versions():
    versions = {"python": platform.python_version()}
    for name in ("torch", "numpy", "h5py"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None:
        parallel = torch.__config__.parallel_info().splitlines()
        versions["torch_parallel"] = "; ".join(line.strip() for line in parallel[:4])
        blas = [line.strip() for line in torch.__config__.show().splitlines() if "BLAS" in line]
        if blas:
            versions["torch_blas"] = blas[0]
    return versions


def binary_version(path):
    try:
        out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=60).stdout.strip()
        return out or "?"
    except (OSError, subprocess.SubprocessError) as e:
        return "unavailable (%s)" % e


class Host:
    """The conditions of one benchmark run: load, threads, versions."""

    def __init__(self, threads, binaries=None, extra_versions=None):
        self.started = datetime.datetime.now().isoformat(timespec="seconds")
        self.load_start = load_average()
        self.load_peak = self.load_start[0]
        self.threads = threads
        self.versions = python_versions()
        for name, path in (binaries or {}).items():
            self.versions[name] = binary_version(path)
        self.versions.update(extra_versions or {})
        self.load_end = None

    def sample_load(self):
        """Call between repeats: keeps the highest 1-minute load average seen."""
        self.load_peak = max(self.load_peak, load_average()[0])
        return self.load_peak

    @property
    def loaded(self):
        return self.load_peak > loaded_above(self.threads)

    def close(self):
        self.load_end = load_average()
        self.load_peak = max(self.load_peak, self.load_end[0])

    def report(self):
        return {"started": self.started, "cpu": cpu_model(), "cores": os.cpu_count(),
                "threads": self.threads,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "(unset)"),
                "load_start": self.load_start, "load_end": self.load_end, "load_peak": self.load_peak,
                "loaded": self.loaded, "loaded_above": loaded_above(self.threads), "versions": self.versions}

    def print_report(self):
        print("host: %s, %d cores; %d thread(s) per side, OMP_NUM_THREADS=%s" % (
            cpu_model(), os.cpu_count(), self.threads, os.environ.get("OMP_NUM_THREADS", "(unset)")))
        print("load average: start %s, end %s, highest seen %.2f" % (
            "/".join(str(x) for x in self.load_start),
            "/".join(str(x) for x in self.load_end) if self.load_end else "?", self.load_peak))
        for name, version in self.versions.items():
            print("version %-15s %s" % (name, version))
        if self.loaded:
            print(loaded_banner(self.load_peak, loaded_above(self.threads)))


def loaded_banner(load, above=LOADED_ABOVE):
    return ("*** LOADED: the load average reached %.2f (> %.1f): other work shared the CPU. These "
            "figures flatter megabatch and are not for reporting; rerun on an idle machine. ***"
            % (load, above))


def median_ratio(numerators, denominators):
    """Median of the per-repeat ratios numerator / denominator (not the ratio of medians)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators))


def check_repeats(repeats):
    if repeats < MIN_REPEATS:
        print("note: %d repeats; reported figures take at least %d (--repeats %d)" % (
            repeats, MIN_REPEATS, MIN_REPEATS))


def finish(name, result, host, out=""):
    """Closes `host`, prints its report and writes `result` plus the host report as JSON to `out`,
    or to bench/results/NAME-<date>-<time>[-loaded].json. Returns the path."""
    host.close()
    print()
    host.print_report()
    payload = dict(result)
    payload["host"] = host.report()
    if not out:
        os.makedirs(RESULTS, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        out = os.path.join(RESULTS, "%s-%s%s.json" % (name, stamp, "-loaded" if host.loaded else ""))
    with open(out, "w") as f:
        json.dump(payload, f, indent=1)
    print("raw results: %s" % out)
    return out


def profile_steps(step, steps=20):
    """With MEGABATCH_PROFILE=FILE set, runs `step()` `steps` more times under torch's operator
    profiler and writes a Chrome trace to FILE, for bench/profile_ops.py (Note [Operator profile]
    in src/train/watch/StepProfiler.h). Call it after the timed steps: profiled steps are slower."""
    path = os.environ.get("MEGABATCH_PROFILE")
    if not path:
        return
    import torch
    with torch.autograd.profiler.profile() as prof:
        for _ in range(steps):
            step()
    prof.export_chrome_trace(path)
    print("operator profile of %d steps: %s" % (steps, path), flush=True)
