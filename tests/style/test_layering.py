"""The shape of src/ (docs/architecture.md, Note [Layers]): every #include runs down the layers
app -> walk -> train -> model -> data -> dist -> config -> common; a layer's folders by role (its rooms)
are known here; in train/ the machinery in the rooms never includes the trainer above it; and no
source file outgrows one sitting (600 lines). Run by CTest as py.style_layering; also usable by hand:

    /usr/bin/python3 tests/style/test_layering.py [SRC_DIR]
"""
import os
import re
import sys
import unittest

LAYERS = ["common", "config", "dist", "data", "model", "train", "walk", "app"]  # bottom to top
# Each layer's rooms (folders by role, one level deep). A new room is added here and to the table
# "Folders by role" in docs/architecture.md.
ROOMS = {
    "data": ["layouts", "pipeline", "tools"],
    "model": ["kinds", "parts"],
    "train": ["checkpoints", "judge", "loop", "memory", "precision", "watch"],
}
# Layers whose top level sits above their rooms: in train/ the top is the Trainer and what the
# app calls (evaluation, signals, loading a trained model); the rooms are the machinery it runs,
# so a room's file includes other rooms but never the top. (In data/ and model/ the top is the
# interface the rooms implement, so there the rooms include it.)
TOP_ABOVE_ROOMS = ["train"]
MAX_LINES = 600
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z]+)/')
INCLUDE_PATH = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


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


def unknown_rooms(src):
    """Folders inside a layer that ROOMS does not name, and folders nested in a room."""
    found = []
    for layer in LAYERS:
        top = os.path.join(src, layer)
        for root, dirs, _ in os.walk(top):
            allowed = ROOMS.get(layer, []) if root == top else []
            found += [os.path.relpath(os.path.join(root, d), src) for d in dirs if d not in allowed]
    return sorted(found)


def includes_of_the_top(src):
    """'file:line: #include ...' for every include, from a room of a TOP_ABOVE_ROOMS layer, of a
    file at that layer's top level."""
    found = []
    for layer in TOP_ABOVE_ROOMS:
        for room in ROOMS[layer]:
            for path in sources(os.path.join(src, layer, room)):
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE_PATH.match(line)
                        if m and os.path.dirname(m.group(1)) == layer:
                            found.append("%s:%d: %s (%s/ is the top of %s, above its rooms)" % (
                                os.path.relpath(path, src), number, line.strip(), layer, layer))
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

    def test_every_room_is_known(self):
        found = unknown_rooms(self.src)
        self.assertEqual([], found, "folders that are no known room (rooms are one level deep); add "
                         "them to ROOMS here and to \"Folders by role\" in docs/architecture.md:\n  %s"
                         % "\n  ".join(found))

    def test_rooms_never_include_the_trainer_above_them(self):
        found = includes_of_the_top(self.src)
        self.assertEqual([], found, "a room's file includes the top of its layer; move what it "
                         "needs into a room, or hand it down from the top:\n  %s" % "\n  ".join(found))

    def test_no_file_over_600_lines(self):
        found = long_files(self.src)
        self.assertEqual([], found, "files over %d lines: split them by concern:\n  %s"
                         % (MAX_LINES, "\n  ".join(found)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        LayeringTest.src = sys.argv.pop(1)
    unittest.main()
