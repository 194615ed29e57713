"""The graphs layout and its tools, driven through the binary as a user would (docs/data-format.md,
"graphs"):

- `megabatch data graphs` turns JSON lines into the layout (compared with h5py), names every bad
  line by file:line and reason with exit code 3 and writes nothing (no file, no .tmp), or skips
  and counts bad lines with --skip-bad;
- `megabatch data synth-graphs --jsonl` writes the same graphs as JSON lines, and the converter
  turns those back into the same file;
- malformed graph files end both ranks of `mpirun -np 2 megabatch data check` with exit code 3
  and a message naming the dataset and what is wrong;
- the h5py example of docs/data-format.md loads, and the batches `data check --dump` gathers are
  the file's graphs, shifted into one graph (a numpy reference).
"""
import json
import os
import sys
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

CONFIG = """data: {{path: {path}, layout: graphs, canonical_shards: 4}}
model: {{kind: gnn, task: {task}}}
train: {{global_batch: 8}}
"""


def text_rows(dataset):
    return [bytes(r).rstrip(b"\0").decode() for r in dataset[()]]


def write_lines(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")
    return path


# --- the JSON-lines converter ----------------------------------------------------------

GOOD = [{"id": "a", "node_features": [[1, 2], [3, 4], [5, 6]], "edges": [[0, 1], [1, 2]]},
        {"id": 7, "node_features": [[0.5, -1]], "edges": []},
        {"id": "c", "node_features": [[1, 1], [2, 2]], "edges": [[1, 0]]}]
GOOD_LABELS = [{"id": "a", "label": 1}, {"id": 7, "label": 0}, {"id": "c", "label": 2}]

# (name, graph lines, label lines, line prefix, message fragment): each must fail with exit 3.
BAD_JSONL = [
    ("not json", GOOD[:1] + ['{"id": "b", "edges": [}'], GOOD_LABELS, "graphs.jsonl:2:",
     "not valid JSON at column 23"),
    ("not an object", GOOD[:1] + ["[1, 2]"], GOOD_LABELS, "graphs.jsonl:2:",
     "expected one JSON object per line, found an array of 2"),
    ("no id", [{"node_features": [[1]], "edges": []}], GOOD_LABELS, "graphs.jsonl:1:",
     "'id' is missing"),
    ("duplicate id", GOOD + [{"id": "a", "node_features": [[1, 2]], "edges": []}], GOOD_LABELS,
     "graphs.jsonl:4:", 'duplicate id "a" (first on line 1)'),
    ("no node inputs", [{"id": "a", "edges": []}], GOOD_LABELS, "graphs.jsonl:1:",
     "the graph has no nodes: give 'node_features'"),
    ("empty node list", [{"id": "a", "node_features": [], "edges": []}], GOOD_LABELS,
     "graphs.jsonl:1:", "its node list is empty"),
    ("ragged features", [{"id": "a", "node_features": [[1, 2], [3]], "edges": []}], GOOD_LABELS,
     "graphs.jsonl:1:", "node_features[1] has 1 values, but node_features[0] has 2"),
    ("nan feature", GOOD[:1] + ['{"id": "b", "node_features": [[1, NaN]], "edges": []}'],
     GOOD_LABELS, "graphs.jsonl:2:", "node_features[0][1] is not finite (NaN)"),
    ("edge out of range", [{"id": "a", "node_features": [[1], [2], [3]], "edges": [[0, 5]]}],
     GOOD_LABELS, "graphs.jsonl:1:", "edges[0][1] = 5: the graph has 3 nodes (ids 0..2)"),
    ("edge not a pair", [{"id": "a", "node_features": [[1], [2]], "edges": [[0, 1, 1]]}],
     GOOD_LABELS, "graphs.jsonl:1:", "edges[0] must be a [source, target] pair"),
    ("no edges key", [{"id": "a", "node_features": [[1]]}], GOOD_LABELS, "graphs.jsonl:1:",
     "'edges' is missing"),
    ("edge features per edge",
     [{"id": "a", "node_features": [[1], [2]], "edges": [[0, 1], [1, 0]], "edge_features": [[1]]}],
     GOOD_LABELS, "graphs.jsonl:1:", "'edge_features' has 1 rows, but the graph has 2 edges"),
    ("width differs from the first graph",
     GOOD[:1] + [{"id": "b", "node_features": [[1, 2, 3]], "edges": []}], GOOD_LABELS,
     "graphs.jsonl:2:", "node_features rows have 3 values (the first graph, line 1, has 2)"),
    ("no label", GOOD, GOOD_LABELS[:2], "graphs.jsonl:3:", 'graph "c" has no label in'),
    ("negative label", GOOD, [GOOD_LABELS[0], {"id": 7, "label": -1}, GOOD_LABELS[2]],
     "labels.jsonl:2:", "class label -1 is negative"),
    ("labels of two kinds", GOOD, [GOOD_LABELS[0], {"id": 7, "label": "cat"}, GOOD_LABELS[2]],
     "labels.jsonl:2:", "label is a name, but the first label (line 1) is a number"),
    ("a second label", GOOD, GOOD_LABELS + [{"id": "a", "label": 0}], "labels.jsonl:4:",
     'a second label for id "a" (first on line 1)'),
]


class ConverterTest(mbtest.TempDirTestCase):
    def convert(self, graphs, labels, *extra):
        g = write_lines(self.path("graphs.jsonl"), graphs)
        args = ["data", "graphs", "--graphs", g, "--out", self.path("g.h5")]
        if labels is not None:
            args += ["--labels", write_lines(self.path("labels.jsonl"), labels)]
        return mbtest.run(args + list(extra))

    def test_features_edges_labels_and_ids(self):
        r = self.convert(GOOD, GOOD_LABELS)
        self.assertExit(r, 0, "3 graphs, 6 nodes, 3 edges", "classification")
        with h5py.File(self.path("g.h5"), "r") as f:
            np.testing.assert_array_equal(f["node_offsets"][()], [0, 3, 4, 6])
            np.testing.assert_array_equal(f["edge_offsets"][()], [0, 2, 2, 3])
            np.testing.assert_array_equal(f["edge_index"][()], [[0, 1, 1], [1, 2, 0]])
            np.testing.assert_array_equal(f["node_features"][()],
                                          [[1, 2], [3, 4], [5, 6], [0.5, -1], [1, 1], [2, 2]])
            np.testing.assert_array_equal(f["label"][()], [1, 0, 2])
            self.assertEqual(text_rows(f["graph_id"]), ["a", "7", "c"])
        self.assertFalse(os.path.exists(self.path("g.h5.tmp")))

    def test_node_types_become_a_vocabulary_and_names_become_classes(self):
        graphs = [{"id": 1, "node_types": ["Call", "Name", "Call"], "edges": [[0, 1], [0, 2]],
                   "label": "safe"},
                  {"id": 2, "node_types": ["Name", "Return"], "edge_index": [[1], [0]],
                   "label": "vulnerable"}]
        r = self.convert(graphs, None, "--undirected")
        self.assertExit(r, 0, "3 node types", "0=safe: 1", "1=vulnerable: 1")
        with h5py.File(self.path("g.h5"), "r") as f:
            names = text_rows(f["node_type_names"])
            self.assertEqual([names[t] for t in f["node_type"][()]],
                             ["Call", "Name", "Call", "Name", "Return"])
            self.assertEqual(f["node_type"].attrs["vocab_size"], 3)
            self.assertEqual(text_rows(f["label_names"]), ["safe", "vulnerable"])
            np.testing.assert_array_equal(f["label"][()], [0, 1])
            # --undirected: each edge also reversed, after the graph's own edges.
            np.testing.assert_array_equal(f["edge_index"][()],
                                          [[0, 0, 1, 2, 1, 0], [1, 2, 0, 0, 0, 1]])
            np.testing.assert_array_equal(f["edge_offsets"][()], [0, 4, 6])

    def test_regression_labels(self):
        labels = [{"id": "a", "label": [0.5, 1]}, {"id": 7, "label": [1, 2]},
                  {"id": "c", "label": [0, -3.25]}]
        self.assertExit(self.convert(GOOD, labels), 0, "regression")
        with h5py.File(self.path("g.h5"), "r") as f:
            np.testing.assert_array_equal(f["label"][()], [[0.5, 1], [1, 2], [0, -3.25]])

    def test_every_bad_line_is_named_and_nothing_is_written(self):
        self.assertGreaterEqual(len(BAD_JSONL), 10)
        for name, graphs, labels, where, fragment in BAD_JSONL:
            with self.subTest(case=name):
                r = self.convert(graphs, labels)
                self.assertExit(r, 3, where, fragment, "--skip-bad")
                self.assertFalse(mbtest.crash_signs(r.output), repr(r))
                self.assertFalse(os.path.exists(self.path("g.h5")), name)
                self.assertFalse(os.path.exists(self.path("g.h5.tmp")), name)

    def test_windows_line_ends_and_a_byte_order_mark(self):
        with open(self.path("graphs.jsonl"), "wb") as f:
            f.write(b"\xef\xbb\xbf" + b"\r\n".join(json.dumps(g).encode() for g in GOOD) + b"\r\n")
        labels = write_lines(self.path("labels.jsonl"), GOOD_LABELS)
        r = mbtest.run(["data", "graphs", "--graphs", self.path("graphs.jsonl"), "--labels", labels,
                        "--out", self.path("g.h5")])
        self.assertExit(r, 0, "3 graphs")

    def test_missing_input_file(self):
        r = mbtest.run(["data", "graphs", "--graphs", self.path("nope.jsonl"), "--out",
                        self.path("g.h5")])
        self.assertExit(r, 3, "nope.jsonl: cannot read")

    def test_skip_bad_skips_and_counts(self):
        graphs = GOOD + ["{broken", {"id": "d", "node_features": [[1, 2]], "edges": [[0, 3]]}]
        r = self.convert(graphs, GOOD_LABELS + [{"id": "d", "label": 0}], "--skip-bad")
        self.assertExit(r, 0, "3 graphs", "skipped 2 bad line(s)", "graphs.jsonl:4:",
                        "graphs.jsonl:5:")
        with h5py.File(self.path("g.h5"), "r") as f:
            self.assertEqual(text_rows(f["graph_id"]), ["a", "7", "c"])

    def test_synthetic_graphs_round_trip_through_json_lines(self):
        synth, back = self.path("synth.h5"), self.path("back.h5")
        r = mbtest.run(["data", "synth-graphs", "--graphs", "60", "--out", synth, "--jsonl",
                        self.path("jsonl")])
        self.assertExit(r, 0, "60 graphs")
        r = mbtest.run(["data", "graphs", "--graphs", self.path("jsonl", "graphs.jsonl"), "--labels",
                        self.path("jsonl", "labels.jsonl"), "--out", back])
        self.assertExit(r, 0, "60 graphs")
        with h5py.File(synth, "r") as a, h5py.File(back, "r") as b:
            for name in ("node_offsets", "edge_offsets", "edge_index", "node_features"):
                np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)
            for dataset, names in (("node_type", "node_type_names"), ("label", "label_names")):
                na, nb = text_rows(a[names]), text_rows(b[names])
                self.assertEqual([na[i] for i in a[dataset][()]], [nb[i] for i in b[dataset][()]])
            self.assertEqual(text_rows(a["graph_id"]), text_rows(b["graph_id"]))


# --- malformed HDF5 graph files -----------------------------------------------------------

def graphs_file(path, graphs=10, **replace):
    """A valid file (graph g: 2 + g % 3 nodes on a ring, both ways), with datasets replaced
    (None drops one)."""
    sizes = [2 + g % 3 for g in range(graphs)]
    edges = []
    for n in sizes:
        edges.append(np.array([[i, (i + 1) % n] for i in range(n)] +
                              [[(i + 1) % n, i] for i in range(n)]).T)
    data = {
        "node_features": np.arange(sum(sizes) * 2, dtype="f4").reshape(-1, 2),
        "node_offsets": np.cumsum([0] + sizes),
        "edge_index": np.concatenate(edges, axis=1),
        "edge_offsets": np.cumsum([0] + [e.shape[1] for e in edges]),
        "label": np.arange(graphs) % 2,
    }
    data.update(replace)
    with h5py.File(path, "w") as f:
        for name, value in data.items():
            if value is not None:
                f[name] = value
    return data


def with_node_types(path, vocab=5, types=None):
    data = graphs_file(path, node_features=None)
    with h5py.File(path, "a") as f:
        f["node_type"] = types if types is not None else np.arange(data["node_offsets"][-1]) % 5
        if vocab is not None:
            f["node_type"].attrs["vocab_size"] = vocab


class MalformedFilesTest(mbtest.TempDirTestCase):
    def check(self, path, *fragments, task="classification"):
        cfg = self.write("c.yaml", CONFIG.format(path=path, task=task))
        r = mbtest.mpirun(2, ["data", "check", "--config", cfg], timeout=120)
        self.assertExit(r, 3, *fragments)
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))
        for rank in ("r0/2", "r1/2"):
            self.assertIn("[%s] [app] error" % rank, r.output, repr(r))

    def test_offsets(self):
        p = self.path("g.h5")
        graphs_file(p, node_offsets=None)
        self.check(p, "dataset /node_offsets is missing")
        good = graphs_file(p)
        offsets, nodes = good["node_offsets"], good["node_offsets"][-1]
        graphs_file(p, node_offsets=offsets + 1)
        self.check(p, "/node_offsets: starts at 1, expected 0")
        bad = offsets.copy()
        bad[3], bad[4] = bad[4], bad[3]
        graphs_file(p, node_offsets=bad)
        self.check(p, "/node_offsets: decreases at graph 3")
        bad = offsets.copy()
        bad[3] = bad[2]
        graphs_file(p, node_offsets=bad)
        self.check(p, "/node_offsets: graph 2 has no nodes")
        bad = offsets.copy()
        bad[-1] -= 1
        graphs_file(p, node_offsets=bad)
        self.check(p, "/node_offsets: ends at %d, but /node_features has %d" % (nodes - 1, nodes))
        bad = good["edge_offsets"].copy()
        bad[-1] += 2
        graphs_file(p, edge_offsets=bad)
        self.check(p, "/edge_offsets: ends at %d, but /edge_index (columns) has %d" % (
            bad[-1], bad[-1] - 2))

    def test_edges(self):
        p = self.path("g.h5")
        good = graphs_file(p)
        edges = good["edge_index"].shape[1]
        graphs_file(p, edge_index=good["edge_index"].T)
        self.check(p, "/edge_index: expected shape [2, E]", "found [%d, 2]" % edges, "edges.T")
        bad = good["edge_index"].copy()
        column = good["edge_offsets"][3] + 1  # graph 3 has 2 nodes; its edge 1 is (1, 0)
        bad[1, column] = 9
        graphs_file(p, edge_index=bad)
        self.check(p, "/edge_index: edge 1 of graph 3 (column %d) is (1, 9), but the graph has 2 "
                   "nodes (local ids 0..1)" % column)
        bad = good["edge_index"].copy()
        bad[0, 5] = -1  # graph 1 (edges 4..9)
        graphs_file(p, edge_index=bad)
        self.check(p, "edge 1 of graph 1 (column 5) is (-1, ", "local to each graph")
        graphs_file(p, edge_features=np.zeros((edges - 1, 1), "f4"))
        self.check(p, "/edge_features: expected E = %d rows" % edges)

    def test_nodes_and_labels(self):
        p = self.path("g.h5")
        good = graphs_file(p)
        graphs_file(p, node_features=None)
        self.check(p, "the graphs have no node inputs")
        x = good["node_features"].copy()
        x[5, 1] = np.nan  # graphs 0, 1, 2 hold rows 0-1, 2-4, 5-8
        graphs_file(p, node_features=x)
        self.check(p, "/node_features: non-finite value (nan) at node row 5 (graph 2)")
        graphs_file(p, label=np.arange(9))
        self.check(p, "/label: expected one row per graph, G = 10 (/node_offsets holds G + 1 = 11)",
                   "found 9")
        graphs_file(p, label=np.zeros(10, "f4"))
        self.check(p, "needs integer class labels, found float32")
        graphs_file(p, label=np.array([0, 1, 0, 1, -1, 0, 1, 0, 1, 0]))
        self.check(p, "class label -1 at graph 4 is negative")
        with_node_types(p, vocab=None)
        self.check(p, "/node_type: attribute vocab_size is missing")
        types = np.arange(good["node_offsets"][-1]) % 5
        types[3] = 7
        with_node_types(p, vocab=5, types=types)
        self.check(p, "/node_type: node type 7 at node row 3 (graph 1) is outside [0, vocab_size = 5)")


# --- the h5py example of docs/data-format.md ------------------------------------------------

class DocExampleTest(mbtest.TempDirTestCase):
    def test_h5py_file_loads_and_batches_are_the_graphs(self):
        rng = np.random.default_rng(3)
        graphs = []  # (node features [n, F], edges [(s, t), ...] with local ids, label)
        for g in range(40):
            n = int(rng.integers(1, 9))
            edges = [(int(s), int(t)) for s, t in rng.integers(0, n, size=(int(rng.integers(0, 12)), 2))]
            graphs.append((rng.standard_normal((n, 3)).astype("f4"), edges, g % 3))
        path = self.path("graphs.h5")
        with h5py.File(path, "w") as f:  # as in docs/data-format.md
            f["node_features"] = np.concatenate([x for x, _, _ in graphs]).astype("f4")
            f["edge_index"] = np.concatenate(
                [np.array(e, "i8").reshape(-1, 2) for _, e, _ in graphs]).T
            f["node_offsets"] = np.cumsum([0] + [len(x) for x, _, _ in graphs])
            f["edge_offsets"] = np.cumsum([0] + [len(e) for _, e, _ in graphs])
            f["label"] = np.array([y for _, _, y in graphs], "i8")
        cfg = self.write("c.yaml", CONFIG.format(path=path, task="classification"))
        dump = self.path("dump.h5")
        r = mbtest.run(["data", "check", "--config", cfg, "--batches", "4", "--dump", dump])
        self.assertExit(r, 0, "layout: graphs")
        with h5py.File(dump, "r") as d:
            batches = [d["train"][b] for b in sorted(d["train"], key=int)] + [d["val"], d["test"]]
            self.assertEqual(len(batches), 6)
            for batch in batches:
                index = batch["sample_index"][()]
                x = np.concatenate([graphs[g][0] for g in index])
                base = np.cumsum([0] + [len(graphs[g][0]) for g in index])
                edges = [np.array(graphs[g][1], "i8").reshape(-1, 2).T + base[i]
                         for i, g in enumerate(index)]
                np.testing.assert_array_equal(batch["node_features"][()], x)
                np.testing.assert_array_equal(batch["edge_index"][()], np.concatenate(edges, axis=1))
                np.testing.assert_array_equal(batch["node_graph"][()],
                                              np.repeat(np.arange(len(index)), np.diff(base)))
                np.testing.assert_array_equal(batch["targets"][()], [graphs[g][2] for g in index])


if __name__ == "__main__":
    unittest.main(verbosity=2)
