"""The commands in the docs work as they stand: they are read from the Markdown files themselves and
run in order, in a temporary folder, so a command that rots in the docs fails CI.

    test_doc_commands.py [DOC ...]      default: every page of PAGES, in that order

What is run:
  - README.md: every ```sh block of the section "Using it", whatever its marker;
  - any page: a code block right after a line `<!-- doc-test -->` (sh: each command, one after the
    other; python: the block as one script), or `<!-- doc-test: dry-run -->` (sh: each launcher
    command with --dry-run, on a pretend node of 8 GPUs, and its config and overrides checked with
    `megabatch train ... --print-config`: for commands that need GPUs or hosts this machine lacks;
    the block's other commands, such as writing a hostfile, run as they stand).
Every page in PAGES must hold at least the blocks it is listed with, so markers cannot silently go.

The folder holds configs/, examples/, launch/ and slurm/ (links into the source tree), an empty
data/, and build/megabatch: a wrapper of the binary under test that makes the commands small
("on small data") by adding, to every `megabatch train` and `walk`, the overrides test_config_headers.py adds
to the configs' headers (train.max_steps=2 and the like). Nothing else is changed. Python blocks
run with /usr/bin/python3 (h5py, torch); after a block that writes an HDF5 file with
h5py.File(NAME, "w"), `megabatch inspect NAME` must read it. Each command must exit 0; a failure
names the page, the line, the command and its output.
"""
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "configs"))
import mbtest  # noqa: E402
from test_config_headers import TRAIN  # noqa: E402  the same shrinking as the configs' headers

# (page, the fewest blocks it must yield): README first, since the pages after it use what its
# commands made (data/demo.h5, runs/demo).
PAGES = [("README.md", 2), ("docs/evaluation.md", 9), ("docs/checkpoint-format.md", 1), ("docs/operations.md", 6),
         ("docs/data-format.md", 5)]
MARKER = re.compile(r"^<!--\s*doc-test(?::\s*([a-z-]+))?\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
TEXT = "It was the best of times, it was the worst of times.\n" * 2000


class Block:
    def __init__(self, page, line, language, mode, text):
        self.page, self.line, self.language, self.mode, self.text = page, line, language, mode, text


def blocks_of(page, markdown):
    """The blocks to run in `markdown` (the text of `page`)."""
    out, section, pending, lines = [], "", None, markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        marker = MARKER.match(line)
        if marker:
            pending = marker.group(1) or "run"
        fence = FENCE.match(line)
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            language = fence.group(1)
            wanted = pending or ("run" if page == "README.md" and section == "Using it" and language == "sh" else None)
            if wanted:
                out.append(Block(page, i + 2, language, wanted, "\n".join(lines[i + 1:end])))
            pending, i = None, end
        elif line.strip() and not marker:
            pending = None  # a marker applies to the block right after it
        i += 1
    return out


def shell_commands(block):
    """[(line number, command)] of an sh block: backslash continuations joined, a here-document
    kept with its command, comment lines and blank lines left out."""
    out, lines, i = [], block.text.split("\n"), 0
    while i < len(lines):
        number, text = block.line + i, lines[i]
        i += 1
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        while text.endswith("\\") and i < len(lines):
            text = text[:-1] + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", text)
        if heredoc:
            while i < len(lines):
                text += "\n" + lines[i]
                i += 1
                if lines[i - 1].strip() == heredoc.group(1):
                    break
        out.append((number, text))
    return out


def write_wrapper(path):
    """build/megabatch: the binary under test, with every `train` and `walk` shrunk and put on the test device."""
    device = " ".join(mbtest.device_overrides())
    script = """#!/bin/sh
# doc test wrapper (tests/docs/test_doc_commands.py): small runs of the binary under test
if [ "$1" = train ] || [ "$1" = walk ]; then
  for a in "$@"; do [ "$a" = --print-config ] && exec %(bin)s "$@"; done
  exec %(bin)s "$@" %(train)s %(device)s
fi
exec %(bin)s "$@"
""" % {"bin": shlex.quote(os.path.abspath(mbtest.BIN) if os.sep in mbtest.BIN else mbtest.BIN),
       "train": " ".join(TRAIN), "device": device}
    with open(path, "w") as f:
        f.write(script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_folder(work):
    for name in ("configs", "examples", "launch", "slurm"):
        os.symlink(os.path.join(mbtest.SOURCE_DIR, name), os.path.join(work, name))
    for name in ("data", "build"):
        os.mkdir(os.path.join(work, name))
    write_wrapper(os.path.join(work, "build", "megabatch"))
    with open(os.path.join(work, "input.txt"), "w") as f:  # the text the tokens writer reads
        f.write(TEXT)


def environment(work, extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", MEGABATCH_BIN=os.path.join(work, "build", "megabatch"),
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update(extra or {})
    return env


def run(where, command, work, env, timeout=600, shell=True):
    start = time.monotonic()
    proc = subprocess.run(command if shell else command, shell=shell, cwd=work, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          executable="/bin/bash" if shell else None)
    shown = command if isinstance(command, str) else " ".join(command)
    print("%s: exit %d after %.1f s: %s" % (where, proc.returncode, time.monotonic() - start,
                                           shown.split("\n")[0][:200]), flush=True)
    if proc.returncode != 0:
        raise AssertionError("%s: the command in the docs failed (exit %d):\n  %s\n--- its output (last 4000 "
                             "characters) ---\n%s" % (where, proc.returncode, shown, proc.stdout[-4000:]))
    return proc.stdout


def dry_run(where, command, work):
    """A launcher command that needs GPUs or hosts: --dry-run on a pretend 8-GPU node, then its
    config and overrides through --print-config."""
    words = shlex.split(command, comments=True)
    launcher = next((i for i, w in enumerate(words) if w.startswith("launch/") and w.endswith(".sh")), None)
    if launcher is None:  # what the launcher needs, such as a hostfile: run as it stands
        run(where, command, work, environment(work))
        return
    words.insert(launcher + 1, "--dry-run")
    env = environment(work, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    run(where, " ".join(shlex.quote(w) for w in words), work, env)
    config = next((i for i, w in enumerate(words) if w.endswith(".yaml")), None)
    if config is None:
        raise AssertionError("%s: the launcher command names no config: %s" % (where, command))
    overrides = [w for w in words[config + 1:] if "=" in w and not w.startswith("-")]
    run(where + " (its config)", ["build/megabatch", "train", "--config", words[config]] + overrides +
        ["--print-config"], work, env, shell=False)


def run_python(where, block, work):
    path = os.path.join(work, "block-%d.py" % block.line)
    with open(path, "w") as f:
        f.write(block.text + "\n")
    run(where, [mbtest.PYTHON, path], work, environment(work), shell=False)
    for written in re.findall(r"h5py\.File\(\s*[\"']([^\"']+)[\"']\s*,\s*[\"']w[\"']", block.text):
        run(where + " (reading %s)" % written, ["build/megabatch", "inspect", written], work,
            environment(work), shell=False)


def run_block(block, work):
    if block.language == "python":
        if block.mode != "run":
            raise AssertionError("%s:%d: a python block can only be run" % (block.page, block.line))
        run_python("%s:%d" % (block.page, block.line), block, work)
        return
    if block.language not in ("sh", "bash", ""):
        raise AssertionError("%s:%d: cannot run a %s block" % (block.page, block.line, block.language))
    for number, command in shell_commands(block):
        where = "%s:%d" % (block.page, number)
        if block.mode == "dry-run":
            dry_run(where, command, work)
        elif block.mode == "run":
            run(where, command, work, environment(work))
        else:
            raise AssertionError("%s: unknown doc-test mode %r (run or dry-run)" % (where, block.mode))


def main():
    wanted = sys.argv[1:]
    pages = [(p, n) for p, n in PAGES if not wanted or p in wanted]
    with tempfile.TemporaryDirectory(prefix="mbdocs-") as work:
        make_folder(work)
        for page, fewest in pages:
            with open(os.path.join(mbtest.SOURCE_DIR, page)) as f:
                blocks = blocks_of(page, f.read())
            if len(blocks) < fewest:
                raise SystemExit("%s: %d blocks to test, expected at least %d (a `<!-- doc-test -->` marker "
                                 "gone?)" % (page, len(blocks), fewest))
            for block in blocks:
                try:
                    run_block(block, work)
                except AssertionError as e:
                    raise SystemExit(str(e))
    print("every command of %s ran" % ", ".join(p for p, _ in pages))


if __name__ == "__main__":
    main()
