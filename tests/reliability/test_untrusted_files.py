"""Hostile checkpoints and data files (issue 29; docs/reliability.md "Hostile files: the threat
model"). Files are edited with h5py the way anyone could, starting from a real checkpoint a
small demo run writes here.

Checkpoints (UntrustedCheckpointTest): (1) a tensor replaced by a chunked float32 dataset
declared [2^34] with a fill value (the file stays small), (2) a tensor replaced by HDF5
external storage naming another file, (3) a tensor without Fletcher-32. Each goes to
`megabatch inspect`, `megabatch eval --checkpoint` and a resume (`train run.resume=FILE`), under
/usr/bin/time -v: exit 4, the message naming the tensor, peak RSS under 1 GB, and nothing read
outside the file: the outside file is a FIFO, so opening it would block until the command's
timeout and fail the test. A newest checkpoint that is hostile makes run.resume=auto fall back.

Legacy (LegacyCheckpointTest): tests/train/fixtures/legacy-6abe393-step10.h5, written by main
at 6abe393 before manifests: every tensor carries Fletcher-32 in a chunked layout, and inspect,
eval and resume load it.

Data files (UntrustedDataTest): external storage, a virtual dataset and an external link are
refused by default (exit 3, naming the dataset and what it points at, the target a FIFO), and
load with data.allow_external=true, the log naming the external file.
TorchScript archives (UntrustedArchiveTest): a zip record declaring more than the file holds,
and a deflate bomb, are refused (exit 2) before LibTorch loads them.
Usage: test_untrusted_files.py [UntrustedCheckpointTest|LegacyCheckpointTest|UntrustedDataTest|UntrustedArchiveTest[.test_x]]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402

FIXTURE = os.path.join(mbtest.SOURCE_DIR, "tests", "train", "fixtures", "legacy-6abe393-step10.h5")
RSS_LIMIT_KB = 1024 * 1024  # 1 GiB
TIMEOUT_S = 90  # a command that opened a FIFO would block here
HOSTILE = "not written by megabatch, or rewritten"


def timed(args, cwd=None):
    """Runs megabatch ARGS under /usr/bin/time -v: (Result, peak RSS in kB)."""
    cmd = ["/usr/bin/time", "-v", mbtest.BIN] + mbtest.with_device(args)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT_S,
                              universal_newlines=True, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s did not end within %d s: it opened a file outside the checkpoint "
                             "(a FIFO that blocks until written)" % (" ".join(cmd), TIMEOUT_S))
    r = mbtest.Result(cmd, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if not m:
        raise AssertionError("no peak RSS from /usr/bin/time -v\n%r" % r)
    return r, int(m.group(1))


def make_fifo(path):
    if os.path.exists(path):
        os.remove(path)
    os.mkfifo(path)


def demo_data(workdir):
    """A small series file with the demo config's streams (the legacy fixture's data)."""
    data = os.path.join(workdir, "demo.h5")
    r = mbtest.run(["data", "synth-series", "--out", data, "--rows", "20000", "--features", "3",
                    "--streams", "m1:1,m5:5,h1:60", "--seed", "3"], timeout=300)
    if r.returncode != 0:
        raise RuntimeError("could not make demo data\n%r" % r)
    return data


def demo_run(workdir, steps=20, every=10, hidden=32):
    """Trains configs/demo.yaml briefly in WORKDIR/run on WORKDIR/demo.h5: (data, run dir).
    The legacy fixture is this with hidden=8, steps=10, by main at 6abe393."""
    data = demo_data(workdir)
    run_dir = os.path.join(workdir, "run")
    r = mbtest.run(["train", "--config", mbtest.config_path("demo.yaml"), "run.dir=" + run_dir,
                    "data.path=" + data, "train.max_steps=%d" % steps, "run.checkpoint_every=%d" % every,
                    "train.eval_every=0", "train.global_batch=16", "model.hidden=%d" % hidden,
                    "model.head_hidden=%d" % hidden, "data.canonical_shards=4", "train.threads=1"],
                   timeout=600)
    if r.returncode != 0:
        raise RuntimeError("could not train the demo run\n%r" % r)
    return data, run_dir


def victim(path):
    """The /model tensor the cases replace: one of 128 values (the issue's), else the smallest."""
    with h5py.File(path, "r") as f:
        sizes = {name: f["model"][name].size for name in f["model"] if isinstance(f["model"][name], h5py.Dataset)}
    exact = sorted(n for n, s in sizes.items() if s == 128)
    return exact[0] if exact else min(sizes, key=lambda n: (sizes[n] if sizes[n] > 1 else 1 << 60, n))


class CheckpointCase(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbuntrusted-")
        cls.data, cls.run_dir = demo_run(cls._shared.name)
        cls.good = os.path.join(cls.run_dir, "checkpoints", "step-00000020.h5")
        cls.older = os.path.join(cls.run_dir, "checkpoints", "step-00000010.h5")
        cls.name = victim(cls.good)
        with h5py.File(cls.good, "r") as f:
            cls.shape = list(f["model"][cls.name].shape)

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def hostile_copy(self, edit):
        path = self.path("step-00000020.h5")
        shutil.copy(self.good, path)
        with h5py.File(path, "r+") as f:
            edit(f["model"], self.name)
        return path

    def check_all_commands(self, path, *fragments):
        """inspect, eval and a resume of PATH: exit 4 naming the tensor and FRAGMENTS, < 1 GB."""
        runs = {
            "inspect": ["inspect", path],
            "eval": ["eval", "--checkpoint", path, "data.path=" + self.data],
            "resume": ["train", "--config", os.path.join(self.run_dir, "config.yaml"),
                       "run.dir=" + self.path("resumed"), "run.resume=" + path],
        }
        for what, args in runs.items():
            r, rss_kb = timed(args, cwd=self.tmp)
            print("%s %s: exit %d, peak RSS %.1f MiB, %.1f s" % (self.id().split(".")[-1], what, r.returncode,
                                                                  rss_kb / 1024.0, r.seconds))
            report = "%s\n%r" % (what, r)
            self.assertEqual(r.returncode, 4, report)
            for fragment in ("/model/" + self.name, HOSTILE) + fragments:
                self.assertIn(fragment, r.output, report)
            self.assertLess(rss_kb, RSS_LIMIT_KB, report)
            self.assertNotIn("all checksums verified", r.output, report)
            self.assertFalse(mbtest.crash_signs(r.output), report)


class UntrustedCheckpointTest(CheckpointCase):
    def test_control_the_demo_checkpoint_loads(self):
        r, rss_kb = timed(["inspect", self.good])
        print("control inspect: exit %d, peak RSS %.1f MiB" % (r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("all checksums verified", r.output)
        self.assertIn("manifest:     every tensor matches it", r.output)
        with h5py.File(self.good, "r") as f:
            manifest = f["meta"].attrs["manifest"]
        self.assertIn("model/%s\tfloat32\t%s" % (self.name, str(self.shape).replace(" ", "").replace(",", ", ")), manifest)

    def test_declared_shape_is_never_allocated(self):
        def edit(model, name):
            del model[name]
            model.create_dataset(name, shape=(2 ** 34,), dtype="f4", chunks=(1 << 20,), fillvalue=0.5, fletcher32=True)
        path = self.hostile_copy(edit)
        self.assertLess(os.path.getsize(path), 4 << 20)
        expected = "[" + ", ".join(str(d) for d in self.shape) + "]"
        # eval knows the model ("... model ... expects [128] float32"); inspect and resume check
        # the manifest ("... the checkpoint's manifest says [128] float32").
        self.check_all_commands(path, "declares [17179869184] float32 (64.00 GiB), but ", expected + " float32")

    def test_external_storage_is_never_read(self):
        outside = self.path("outside.raw")
        nbytes = int(np.prod(self.shape)) * 4
        with open(outside, "wb") as f:
            f.write(np.full(nbytes // 4, 7.0, "f4").tobytes())

        def edit(model, name):
            del model[name]
            model.create_dataset(name, shape=tuple(self.shape), dtype="f4", external=[(outside, 0, nbytes)])
        path = self.hostile_copy(edit)
        make_fifo(outside)  # opening it would block: the commands must not
        self.check_all_commands(path, "external storage in " + outside, "(bytes 0..%d)" % (nbytes - 1))

    def test_tensor_without_fletcher32_is_refused(self):
        def edit(model, name):
            values = model[name][()]
            del model[name]
            model.create_dataset(name, data=values, chunks=values.shape)
        path = self.hostile_copy(edit)
        self.check_all_commands(path, "carries no Fletcher-32 checksum")

    def test_external_link_is_never_followed(self):
        outside = self.path("outside.h5")
        with h5py.File(outside, "w") as f:
            f["x"] = np.zeros(self.shape, "f4")

        def edit(model, name):
            del model[name]
            model[name] = h5py.ExternalLink(outside, "/x")
        path = self.hostile_copy(edit)
        make_fifo(outside)
        self.check_all_commands(path, "an external link to " + outside + ":/x")

    def config_edited(self, path, hidden):
        """Copies the good checkpoint to PATH with only /meta's model.hidden changed to HIDDEN."""
        shutil.copy(self.good, path)
        with h5py.File(path, "r+") as f:
            config = f["meta"].attrs["config"]
            config = config.decode() if isinstance(config, bytes) else config
            edited, count = re.subn(r"(\n\s+hidden:\s*)32\b", r"\g<1>%d" % hidden, config)
            self.assertEqual(count, 1, config)
            f["meta"].attrs["config"] = edited
        return path

    def run_refused(self, what, args, fragment):
        r, rss_kb = timed(args, cwd=self.tmp)
        print("%s, %s: exit %d, peak RSS %.1f MiB, %.1f s" % (self.id().split(".")[-1], what, r.returncode,
                                                             rss_kb / 1024.0, r.seconds))
        report = "%s\n%r" % (what, r)
        self.assertEqual(r.returncode, 4, report)
        self.assertIn(fragment, r.output, report)
        self.assertIn(HOSTILE, r.output, report)
        self.assertLess(rss_kb, RSS_LIMIT_KB, report)
        self.assertFalse(mbtest.crash_signs(r.output), report)

    def test_config_describing_a_huge_model_is_refused_before_it_is_built(self):
        """Issue 36 item 5: /meta's config edited to model.hidden 40000 over tensors of 32 (the
        LSTM would need about 25 GB): every command refuses it (exit 4) within the file's memory
        bound, before the model is built."""
        path = self.config_edited(self.path("step-00000020.h5"), 40000)
        runs = {
            "inspect": ["inspect", path],
            "eval": ["eval", "--checkpoint", path, "data.path=" + self.data],
            "predict": ["predict", "--checkpoint", path, "--data", self.data, "--out", self.path("p.h5")],
            "export": ["export", "--checkpoint", path, "--to", self.path("m.pt")],
            "sample": ["sample", "--checkpoint", path, "--prompt", "1+1="],
            "resume": ["train", "--config", os.path.join(self.run_dir, "config.yaml"),
                       "run.dir=" + self.path("resumed"), "run.resume=" + path],
        }
        for what, args in runs.items():
            self.run_refused(what, args, "its /meta config describes a lstm model larger than the file's tensors")
        self.assertFalse(os.path.exists(self.path("p.h5")))
        self.assertFalse(os.path.exists(self.path("m.pt")))

    def test_config_describing_other_shapes_is_refused_and_resume_auto_falls_back(self):
        """A config edited to a smaller model (hidden 16 over tensors of 32) fits in memory but
        not the tensors: inspect and a resume refuse it (exit 4); run.resume=auto falls back to
        the older checkpoint."""
        path = self.config_edited(self.path("step-00000020.h5"), 16)
        expects = "but the lstm model the checkpoint's config describes expects"
        self.run_refused("inspect", ["inspect", path], expects)
        self.run_refused("resume", ["train", "--config", os.path.join(self.run_dir, "config.yaml"),
                                    "run.dir=" + self.path("resumed"), "run.resume=" + path], expects)
        r = mbtest.run(["inspect", self.good], timeout=60)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("config:       describes exactly these model tensors", r.output)
        run_dir = self.path("run")
        shutil.copytree(self.run_dir, run_dir)
        self.config_edited(os.path.join(run_dir, "checkpoints", "step-00000020.h5"), 16)
        r = mbtest.run(["train", "--config", os.path.join(run_dir, "config.yaml"), "run.dir=" + run_dir,
                        "run.resume=auto", "train.max_steps=22"], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn(expects, r.output)
        self.assertIn("falling back to " + os.path.join(run_dir, "checkpoints", "step-00000010.h5"), r.output)

    def test_resume_auto_falls_back_from_a_hostile_newest_checkpoint(self):
        run_dir = self.path("run")
        shutil.copytree(self.run_dir, run_dir)
        newest = os.path.join(run_dir, "checkpoints", "step-00000020.h5")
        with h5py.File(newest, "r+") as f:
            values = f["model"][self.name][()]
            del f["model"][self.name]
            f["model"].create_dataset(self.name, data=values, chunks=values.shape)
        r, rss_kb = timed(["train", "--config", os.path.join(run_dir, "config.yaml"), "run.dir=" + run_dir,
                           "run.resume=auto", "train.max_steps=22"])
        print("resume=auto past a hostile newest checkpoint: exit %d, peak RSS %.1f MiB" % (r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn(HOSTILE, r.output)
        self.assertIn("falling back to " + os.path.join(run_dir, "checkpoints", "step-00000010.h5"), r.output)


class LegacyCheckpointTest(mbtest.TempDirTestCase):
    def test_every_tensor_carries_fletcher32_and_chunks(self):
        count = 0
        with h5py.File(FIXTURE, "r") as f:
            self.assertNotIn("manifest", f["meta"].attrs)  # written before manifests

            def visit(name, obj):
                nonlocal count
                if isinstance(obj, h5py.Dataset) and obj.ndim > 0:
                    count += 1
                    self.assertTrue(obj.fletcher32, name)
                    self.assertIsNotNone(obj.chunks, name)
                    self.assertIsNone(obj.compression, name)
                    self.assertEqual(obj.external, None, name)
            for group in ("model", "optimizer", "extra"):
                f[group].visititems(visit)
        print("legacy fixture: %d tensors, every one chunked with Fletcher-32" % count)
        self.assertGreater(count, 4)

    def test_inspect_eval_and_resume_load_it(self):
        data = demo_data(self.tmp)
        r, rss_kb = timed(["inspect", FIXTURE])
        print("legacy inspect: exit %d, peak RSS %.1f MiB" % (r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("all checksums verified", r.output)
        self.assertIn("manifest:     none (written before manifests)", r.output)
        r, rss_kb = timed(["eval", "--checkpoint", FIXTURE, "data.path=" + data])
        print("legacy eval: exit %d, peak RSS %.1f MiB" % (r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        r, rss_kb = timed(["train", "--config", mbtest.config_path("demo.yaml"), "run.dir=" + self.path("resumed"),
                           "run.resume=" + FIXTURE, "data.path=" + data, "train.max_steps=12",
                           "train.eval_every=0", "model.hidden=8", "model.head_hidden=8", "train.threads=1"])
        print("legacy resume: exit %d, peak RSS %.1f MiB" % (r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("resuming from " + FIXTURE + " (step 10)", r.output)


SAMPLES = """run: {{dir: {run}, log_every: 1}}
data: {{path: {path}, layout: samples, canonical_shards: 4}}
model: {{kind: mlp, task: regression, hidden: 8}}
train: {{global_batch: 16, max_steps: 2, eval_every: 0, threads: 1}}
"""


class UntrustedDataTest(mbtest.TempDirTestCase):
    """/features of a samples file stored outside it, three ways."""

    def setUp(self):
        super().setUp()
        self.features = np.random.default_rng(0).standard_normal((200, 3)).astype("f4")
        self.config = self.write("config.yaml", SAMPLES.format(run=self.path("run"), path=self.path("data.h5")))

    def build(self, kind, fifo):
        data = self.path("data.h5")
        for old in ("features.raw", "source.h5"):  # a FIFO left by the default case
            if os.path.exists(self.path(old)):
                os.remove(self.path(old))
        if kind == "external storage":
            outside = self.path("features.raw")
            with open(outside, "wb") as f:
                f.write(self.features.tobytes())
            with h5py.File(data, "w") as f:
                f.create_dataset("features", shape=self.features.shape, dtype="f4",
                                 external=[(outside, 0, self.features.nbytes)])
                f["targets"] = np.zeros(200, "f4")
            pointer = "external storage in %s (bytes 0..%d)" % (outside, self.features.nbytes - 1)
        else:
            outside = self.path("source.h5")
            with h5py.File(outside, "w") as f:
                f["features"] = self.features
            with h5py.File(data, "w", libver="latest") as f:
                if kind == "virtual dataset":
                    layout = h5py.VirtualLayout(shape=self.features.shape, dtype="f4")
                    layout[:] = h5py.VirtualSource(outside, "features", shape=self.features.shape)
                    f.create_virtual_dataset("features", layout)
                    pointer = "a virtual dataset (VDS) mapping 1 source (%s:features)" % outside
                else:
                    f["features"] = h5py.ExternalLink(outside, "/features")
                    pointer = "an external link to %s:/features" % outside
                f["targets"] = np.zeros(200, "f4")
        if fifo:
            make_fifo(outside)
        return data, pointer

    def check(self, kind):
        data, pointer = self.build(kind, fifo=True)
        r, rss_kb = timed(["train", "--config", self.config])
        print("%s, default: exit %d, peak RSS %.1f MiB" % (kind, r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 3, repr(r))
        self.assertIn("/features is " + pointer, r.output, repr(r))
        self.assertIn("data.allow_external: true", r.output, repr(r))
        r, _ = timed(["inspect", data])
        print("%s, inspect: exit %d" % (kind, r.returncode))
        self.assertIn("/features is " + pointer, r.output, repr(r))

        data, pointer = self.build(kind, fifo=False)
        r, rss_kb = timed(["train", "--config", self.config, "data.allow_external=true"])
        print("%s, data.allow_external=true: exit %d, peak RSS %.1f MiB" % (kind, r.returncode, rss_kb / 1024.0))
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertRegex(r.output, r"\[data\] info: .*/features is %s \(read because data.allow_external = true\)"
                         % re.escape(pointer))

    def test_external_storage(self):
        self.check("external storage")

    def test_virtual_dataset(self):
        self.check("virtual dataset")

    def test_external_link(self):
        self.check("external link")

    def test_data_text_reads_regular_files_only(self):
        fifo = self.path("text.fifo")
        make_fifo(fifo)
        for source in ("/dev/zero", fifo):
            r, rss_kb = timed(["data", "text", "--in", source, "--out", self.path("tokens.h5")])
            print("data text --in %s: exit %d, peak RSS %.1f MiB" % (source, r.returncode, rss_kb / 1024.0))
            self.assertEqual(r.returncode, 2, repr(r))
            self.assertIn("not a regular file", r.output, repr(r))
            self.assertLess(rss_kb, RSS_LIMIT_KB, repr(r))
        text = self.write("text.txt", "hello tokens\n" * 100)
        r, _ = timed(["data", "text", "--in", text, "--out", self.path("tokens.h5")])
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("1300 byte tokens", r.output, repr(r))


class UntrustedArchiveTest(mbtest.TempDirTestCase):
    """model.path archives whose zip records declare more than they hold: refused (exit 2)
    before LibTorch allocates what they declare."""

    def setUp(self):
        super().setUp()
        with h5py.File(self.path("data.h5"), "w") as f:
            f["features"] = np.random.default_rng(0).standard_normal((200, 3)).astype("f4")
            f["targets"] = np.zeros(200, "f4")
        self.config = self.write("config.yaml", SAMPLES.format(run=self.path("run"), path=self.path("data.h5")))
        r = subprocess.run([mbtest.PYTHON, "-c", "import torch, sys; torch.jit.save(torch.jit.script("
                            "torch.nn.Linear(3, 1)), sys.argv[1])", self.path("good.pt")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stdout)

    def train(self, archive):
        r, rss_kb = timed(["train", "--config", self.config, "model.kind=torchscript", "model.path=" + archive])
        print("%s: exit %d, peak RSS %.1f MiB" % (os.path.basename(archive), r.returncode, rss_kb / 1024.0))
        self.assertLess(rss_kb, RSS_LIMIT_KB, repr(r))
        return r

    def test_control_a_saved_archive_passes_the_bounds(self):
        r = self.train(self.path("good.pt"))
        self.assertNotIn("not an archive torch.jit.save wrote", r.output, repr(r))

    def test_record_declaring_more_than_the_file(self):
        data = bytearray(open(self.path("good.pt"), "rb").read())
        at = data.find(b"PK\x01\x02")
        while at >= 0:
            name_len = int.from_bytes(data[at + 28:at + 30], "little")
            name = bytes(data[at + 46:at + 46 + name_len])
            if name.endswith(b"data/0"):
                data[at + 20:at + 28] = (0x7FFFFFFF).to_bytes(4, "little") * 2
                break
            at = data.find(b"PK\x01\x02", at + 4)
        self.assertGreaterEqual(at, 0, "no data/0 record in the archive")
        with open(self.path("lying.pt"), "wb") as f:
            f.write(data)
        r = self.train(self.path("lying.pt"))
        self.assertEqual(r.returncode, 2, repr(r))
        self.assertIn("declares 2147483647 bytes at offset", r.output, repr(r))
        self.assertIn("not an archive torch.jit.save wrote, or damaged", r.output, repr(r))

    def test_deflate_bomb(self):
        import zipfile
        with zipfile.ZipFile(self.path("good.pt")) as good, \
                zipfile.ZipFile(self.path("bomb.pt"), "w", zipfile.ZIP_DEFLATED) as bomb:
            prefix = good.namelist()[0].split("/")[0]
            for item in good.namelist():
                bomb.writestr(item, good.read(item))
            with bomb.open(prefix + "/data/99", "w") as f:
                zeros = bytes(1 << 20)
                for _ in range(200):
                    f.write(zeros)
        self.assertLess(os.path.getsize(self.path("bomb.pt")), 2 << 20)
        r = self.train(self.path("bomb.pt"))
        self.assertEqual(r.returncode, 2, repr(r))
        self.assertIn("not an archive torch.jit.save wrote, or damaged", r.output, repr(r))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
