"""The shape of src/ (docs/architecture.md, Note [Layers]): every #include runs down the layers
app -> train -> model -> data -> dist -> config -> common, and no source file outgrows one
sitting (600 lines). Run by CTest as py.style_layering; also usable by hand:

    /usr/bin/python3 tests/style/test_layering.py [SRC_DIR]
"""
import os
import re
import sys
import unittest

LAYERS = ["common", "config", "dist", "data", "model", "train", "app"]  # bottom to top
MAX_LINES = 600
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z]+)/')


def sources(src):
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if name.endswith((".h", ".cpp", ".h.in")):
                yield os.path.join(root, name)


def layer_of(src, path):
    return os.path.relpath(path, src).split(os.sep)[0]


def upward_includes(src):
    """'file:line: #include ...' for every include of a layer above the including file's."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for path in sources(src):
        own = layer_of(src, path)
        if own not in rank:
            continue
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in rank and rank[m.group(1)] > rank[own]:
                    found.append("%s:%d: %s (%s is above %s)" % (
                        os.path.relpath(path, src), number, line.strip(), m.group(1), own))
    return found


def long_files(src):
    found = []
    for path in sources(src):
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES:
            found.append("%s: %d lines" % (os.path.relpath(path, src), lines))
    return found


class LayeringTest(unittest.TestCase):
    src = SRC

    def test_every_folder_is_a_known_layer(self):
        folders = sorted(d for d in os.listdir(self.src) if os.path.isdir(os.path.join(self.src, d)))
        self.assertEqual(sorted(LAYERS), folders,
                         "src/ holds a folder that is no layer (or a layer is missing): add it to "
                         "LAYERS here and to Note [Layers] in docs/architecture.md")

    def test_includes_run_down_the_layers(self):
        found = upward_includes(self.src)
        self.assertEqual([], found, "includes that run up the layers (%s, bottom to top); move "
                         "the code down or hand the values down from above:\n  %s"
                         % (" < ".join(LAYERS), "\n  ".join(found)))

    def test_no_file_over_600_lines(self):
        found = long_files(self.src)
        self.assertEqual([], found, "files over %d lines: split them by concern:\n  %s"
                         % (MAX_LINES, "\n  ".join(found)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        LayeringTest.src = sys.argv.pop(1)
    unittest.main()
