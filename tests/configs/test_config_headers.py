"""Every shipped config (configs/*.yaml, examples/**/*.yaml) starts with the commands that make its
data and train it. This driver runs one config's header commands, as written but shrunk, so that a
header that rots (a flag renamed, a data file too small for the config's windows, a missing step)
fails CI (issue 28).

    test_config_headers.py CONFIG          (a path relative to the repository root, or absolute)

Header commands are the lines of the leading comment block indented by two or more spaces after
the `#` whose text starts with `megabatch `, `mpirun `, or `/usr/bin/python3 ` (a trailing
backslash continues a line; `# ...` after a command is a comment; prose is indented by one space). They run in order, in a fresh working directory that holds configs/ and examples/
(links into the source tree) and an empty data/, with `megabatch` being the binary under test.
Shrinking, the same for every config:
  - mpirun -np N  ->  -np min(N, 2) --oversubscribe
  - megabatch train (or walk) ...  +  train.max_steps=2 train.eval_batches=2 train.global_batch=16
    (and the model shrinks of SHRINK_TRAIN below for configs too large for a CPU step)
  - megabatch data synth-series ... --features F  ->  --features min(F, 8)
  - megabatch data text --in FILE: FILE is written (2 MB of text) when the header leaves it to you
  - megabatch sample ... --max-new-tokens 4
Row counts (--rows, --dates, --graphs, --problems) stay as written: they decide whether the
config's splits and windows fit the data, which is what a header most often gets wrong.
A failing command fails the test with the config file, the command as written, the command run,
its exit code and its output.
"""
import os
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

PREFIXES = ("megabatch ", "mpirun ", "/usr/bin/python3 ")
TRAIN = ["train.max_steps=2", "train.eval_batches=2", "train.global_batch=16", "run.checkpoint_every=0"]
# Models that a CPU cannot step through in seconds at their written size.
SHRINK_TRAIN = {
    "configs/gpt2-small.yaml": ["model.hidden=64", "model.layers=1", "model.heads=2", "model.vocab_size=256",
                                "data.context=64", "data.canonical_shards=4", "train.precision=fp32",
                                "train.micro_batch=0"],
    "configs/bench-lstm-seed.yaml": ["model.hidden=16", "train.precision=fp32"],
    "configs/lstm-multitf.yaml": ["model.hidden=16", "model.head_hidden=16", "train.precision=fp32"],
}


def header_commands(path):
    """[(line number, command text)] of the header of the config at `path`."""
    commands, pending, first = [], None, 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.startswith("#"):
                break
            text = line[1:].strip()
            if pending is not None:
                pending += " " + text
            elif line[1:].startswith("  ") and text.startswith(PREFIXES):
                pending, first = text, number
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            commands.append((first, pending))
            pending = None
    return commands


def shrink(argv, config, workdir):
    """The command line to run for `argv` (a header command, split)."""
    argv = list(argv)
    out = []
    if argv[0] == "mpirun":
        i = 1
        launcher = ["mpirun"]
        while i < len(argv) and argv[i] != "megabatch":
            if argv[i] == "-np":
                launcher += ["-np", str(min(int(argv[i + 1]), 2))]
                i += 2
                continue
            launcher.append(argv[i])
            i += 1
        if "--oversubscribe" not in launcher:
            launcher.append("--oversubscribe")
        out = [mbtest.MPIEXEC] + launcher[1:]
        argv = argv[i:]
        np_ = int(launcher[launcher.index("-np") + 1]) if "-np" in launcher else 1
    else:
        np_ = 1
    if argv[0] == "/usr/bin/python3":
        return [mbtest.PYTHON] + argv[1:]
    if argv[0] != "megabatch":
        raise AssertionError("%s: header command %r does not start with megabatch, mpirun or /usr/bin/python3"
                             % (config, " ".join(argv)))
    args = argv[1:]
    if args[:1] in (["train"], ["walk"]):  # a walk trains every fold as `train` would
        args += TRAIN + SHRINK_TRAIN.get(config, [])
    if args[:2] == ["data", "synth-series"] and "--features" in args:
        i = args.index("--features") + 1
        args[i] = str(min(int(args[i]), 8))
    if args[:2] == ["data", "text"] and "--in" in args:
        source = os.path.join(workdir, args[args.index("--in") + 1])
        if not os.path.exists(source):
            with open(source, "w") as f:
                f.write("It was the best of times, it was the worst of times.\n" * 40000)
    if args[:1] == ["sample"]:
        args += ["--max-new-tokens", "4"]
    return out + [mbtest.BIN] + mbtest.with_device(args, np_)


def run_header(config):
    """Runs the header commands of `config` (relative to the source tree, or any path: a copy)."""
    source = mbtest.SOURCE_DIR
    path = config if os.path.isabs(config) else os.path.join(source, config)
    relative = os.path.relpath(path, source) if path.startswith(source + os.sep) else config
    commands = header_commands(path)
    trains = [["megabatch", "train"], ["megabatch", "walk"]]
    if not any(c.split()[:2] in trains or " megabatch train " in c or " megabatch walk " in c
               for _, c in commands):
        raise AssertionError("%s: the header names no `megabatch train` (or walk) command (it must start with the "
                             "commands that make its data and train it)" % relative)
    with open(path) as f:
        comments = [line for line in f if line.startswith("#")]
    if not any("Sized for" in line for line in comments):
        raise AssertionError("%s: the header does not say what the config is sized for (a 'Sized for:' line)"
                             % relative)
    with tempfile.TemporaryDirectory(prefix="mbheader-") as work:
        for name in ("configs", "examples"):
            os.symlink(os.path.join(source, name), os.path.join(work, name))
        os.mkdir(os.path.join(work, "data"))
        for number, command in commands:
            argv = shlex.split(command, comments=True)
            cmd = shrink(argv, relative, work)
            start = time.monotonic()
            env = dict(os.environ, OMP_NUM_THREADS="1")
            proc = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=900, env=env)
            seconds = time.monotonic() - start
            print("%s:%d: %s\n  ran: %s\n  exit %d after %.1f s" % (relative, number, command, " ".join(cmd),
                                                                   proc.returncode, seconds), flush=True)
            if proc.returncode != 0:
                raise AssertionError(
                    "%s: header command on line %d failed (exit %d):\n  as written: %s\n  as run:     %s\n"
                    "--- its output (last 3000 characters) ---\n%s"
                    % (relative, number, proc.returncode, command, " ".join(cmd), proc.stdout[-3000:]))


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_config_headers.py CONFIG")
    try:
        run_header(sys.argv[1])
    except AssertionError as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    print("OK: %s: every header command ran" % sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
