"""Every path to a project file named in the project's comments and documents exists, so that a
move or a removal cannot leave a comment or a page pointing at a file that is gone (a reader who
follows a stale name finds nothing and learns to distrust the rest). Run by CTest as
py.style_paths; also usable by hand:

    /usr/bin/python3 tests/style/test_paths.py [REPO_ROOT]

A path counts when it names a project file: it ends in a source or document suffix and starts
with a folder of the repository (`src/train/Trainer.h`, `docs/operations.md`), a layer of src/
(`train/Trainer.h`, as includes spell it) or a room (`kinds/Mlp.cpp`). Generated files and the
records of past runs (docs/logs/, bench/results/: they quote the tree as it was then) are not
checked. Paths with placeholders (`*`, `<...>`, `{a,b}`, `DATE`, `...`) are patterns, not names.
"""
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SUFFIXES = (".h", ".cpp", ".h.in", ".py", ".sh", ".cmake", ".md", ".yaml", ".yml")
# Where the project's own words are: comments in code, scripts, documents.
CHECKED = re.compile(r"(\.(h|cpp|in|py|sh|cmake|md|yaml|yml)$|(^|/)CMakeLists\.txt$|^\.ci/run$)")
# Records of what a past run printed, and fixtures copied from elsewhere.
RECORDS = ("docs/logs/", "bench/results/", "tests/train/fixtures/")
# Paths that exist only in a build tree or on a user's machine.
GENERATED = {"generated/megabatch/Version.h", "megabatch/Version.h"}
PATH = re.compile(r"(?<![A-Za-z0-9_./~$-])((?:\.?[A-Za-z0-9_-]+/)+[A-Za-z0-9_.-]+)")
PLACEHOLDER = re.compile(r"[*<>{}]|DATE|\.\.\.|XXX|NAME|/N\.|\$")


def tracked_files(root):
    out = subprocess.run(["git", "ls-files"], cwd=root, stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.isfile(os.path.join(root, f))]


def anchors(files):
    """First folders a project path may start with: the repository's, src/'s layers, rooms."""
    tops, layers, rooms = set(), set(), set()
    for f in files:
        parts = f.split("/")
        if len(parts) > 1:
            tops.add(parts[0])
        if parts[0] == "src" and len(parts) > 2:
            layers.add(parts[1])
        if parts[0] == "src" and len(parts) > 3:
            rooms.add(parts[2])
    return tops, layers, rooms


def exists(root, path, own_dir, layers):
    candidates = [path, os.path.join("src", path)]
    while own_dir:  # relative to the naming file's folder or one above it (tests/*/Tests.cmake)
        candidates.append(os.path.join(own_dir, path))
        own_dir = os.path.dirname(own_dir)
    candidates += [os.path.join("src", layer, path) for layer in layers]
    return any(os.path.exists(os.path.join(root, c)) for c in candidates)


def stale_paths(root):
    """'file:line: path' for each named project path that does not exist."""
    files = tracked_files(root)
    tops, layers, rooms = anchors(files)
    starts = tops | layers | rooms
    found = []
    for f in files:
        if not CHECKED.search(f) or f.startswith(RECORDS):
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(text, 1):
                for path in PATH.findall(line):
                    path = path.rstrip(".")
                    first = path.lstrip("./").split("/")[0]
                    if (first not in starts or not path.endswith(SUFFIXES) or PLACEHOLDER.search(path)
                            or path in GENERATED or path.startswith("build")):
                        continue
                    if not exists(root, path, os.path.dirname(f), layers):
                        found.append("%s:%d: %s" % (f, number, path))
    return found


class PathsTest(unittest.TestCase):
    root = ROOT

    def test_every_named_project_file_exists(self):
        found = stale_paths(self.root)
        self.assertEqual([], found, "comments or documents name project files that do not exist "
                         "(moved or removed?): point them at the file's new place, or drop the "
                         "name:\n  %s" % "\n  ".join(found))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        PathsTest.root = sys.argv.pop(1)
    unittest.main()
