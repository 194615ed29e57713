"""TensorBoard event files (Note [TensorBoard event files] in src/train/watch/TensorBoard.cpp),
read by an independent reader: Python's protobuf (python3-protobuf) on the schema protoc compiles
from src/train/watch/TensorBoardEvent.proto here, with each record's CRC-32C checked by
python3-crc32c.

- Every number of every metrics.jsonl record is in the event file as a scalar: the same tags,
  steps and values (to float32), and the resolved config is there as text.
- A kill -9 mid-run and a resume: read with TensorBoard's purge rule (a SessionLog START at step
  S drops what the earlier files hold from step S on), every step shows once, with the values of
  an uninterrupted run after the resume. Running the finished run again adds no step.
- run.tensorboard=false writes no event file.
"""
import glob
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch"))
import mbtest  # noqa: E402
from test_launch import DEMO, synth_demo_data  # noqa: E402

import crc32c  # noqa: E402  python3-crc32c
import numpy as np  # noqa: E402

PROTO = os.path.join(mbtest.SOURCE_DIR, "src", "train", "watch", "TensorBoardEvent.proto")
STEPS = 40
CHECKPOINT_EVERY = 10
DIE_AFTER = 13


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """The records of an event file, each CRC-checked; a torn last record is left out (as
    TensorBoard's reader leaves it). Returns (records, bytes left after the last whole one)."""
    with open(path, "rb") as f:
        data = f.read()
    records, pos = [], 0
    while pos + 12 <= len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert header_crc == masked(crc32c.crc32c(header)), "%s: bad length CRC at byte %d" % (path, pos)
        if pos + 12 + length + 4 > len(data):
            break
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert body_crc == masked(crc32c.crc32c(body)), "%s: bad data CRC at byte %d" % (path, pos)
        records.append(body)
        pos += 16 + length
    return records, len(data) - pos


class EventReader:
    """Events of a run's event files, in TensorBoard's file order, through protoc's classes."""

    def __init__(self, tmp):
        out = os.path.join(tmp, "proto")
        os.makedirs(out, exist_ok=True)
        subprocess.run(["protoc", "-I", os.path.dirname(PROTO), "--python_out", out, PROTO], check=True)
        sys.path.insert(0, out)
        import TensorBoardEvent_pb2  # noqa: E402
        self.pb = TensorBoardEvent_pb2

    def files(self, run_dir):
        return sorted(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*")))

    def events(self, path):
        records, torn = read_records(path)
        events = []
        for body in records:
            event = self.pb.Event()
            event.ParseFromString(body)
            events.append(event)
        return events, torn

    def scalars(self, run_dir):
        """{(tag, step): [values]} with TensorBoard's purge rule applied, and the events."""
        got, every = {}, []
        for path in self.files(run_dir):
            events, _ = self.events(path)
            every.append(events)
            for event in events:
                if event.HasField("session_log") and event.session_log.status == self.pb.SessionLog.START:
                    got = {k: v for k, v in got.items() if k[1] < event.step}
                if event.HasField("summary"):
                    for value in event.summary.value:
                        if value.HasField("simple_value"):
                            got.setdefault((value.tag, event.step), []).append(value.simple_value)
        return got, every


def expected_scalars(run_dir):
    """{(tag, step): [value]} from metrics.jsonl, by the writer's rule."""
    want = {}
    for record in mbtest.read_metrics(run_dir):
        kind = record.get("event")
        prefix = record.get("split", "val") if kind == "eval" else kind
        if kind == "baseline":
            prefix = "baseline_" + record["split"]
        for key, value in record.items():
            if key in ("step", "time") or isinstance(value, str) or isinstance(value, bool):
                continue
            want.setdefault(("%s/%s" % (prefix, key), record["step"]), []).append(value)
    return want


def train_args(data, run_dir, *more):
    return ["train", "--config", DEMO, "train.device=cpu", "data.path=" + data, "run.dir=" + run_dir,
            "train.max_steps=%d" % STEPS, "run.log_every=1", "train.eval_every=20",
            "run.checkpoint_every=%d" % CHECKPOINT_EVERY, "run.progress=lines"] + list(more)


class TensorBoardTest(mbtest.TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.data = self.path("demo.h5")
        synth_demo_data(self.data)
        self.reader = EventReader(self.tmp)

    def test_every_scalar_of_metrics_jsonl_is_in_the_event_file(self):
        run = self.path("run")
        self.assertExit(mbtest.mpirun(2, train_args(self.data, run), timeout=300), 0)
        files = self.reader.files(run)
        self.assertEqual(len(files), 1, files)
        self.assertRegex(os.path.basename(files[0]), r"^events\.out\.tfevents\.\d{10}\.[^.]+\.\d+$")
        events, torn = self.reader.events(files[0])
        self.assertEqual(torn, 0)
        self.assertEqual(events[0].file_version, "brain.Event:2")
        texts = [v for e in events for v in e.summary.value if v.HasField("tensor")]
        self.assertEqual([t.tag for t in texts], ["config"])
        self.assertEqual(texts[0].metadata.plugin_data.plugin_name, "text")
        self.assertIn("checkpoint_every: %d" % CHECKPOINT_EVERY,
                      texts[0].tensor.string_val[0].decode())
        got, _ = self.reader.scalars(run)
        want = expected_scalars(run)
        self.assertEqual(sorted(got), sorted(want))
        for key, values in want.items():
            np.testing.assert_array_equal(np.float32(values), np.float32(got[key]), err_msg=str(key))
        tags = {tag for tag, _ in got}
        for tag in ("train/loss", "train/lr", "train/samples_per_s", "train/fwd_bwd_time_s", "train/grad_norm",
                    "train/mem_peak_mb", "train/skipped_steps", "val/loss", "memory_plan/total_bytes",
                    "checkpoint/write_s"):
            self.assertIn(tag, tags)
        print("%d scalars under %d tags, each equal to metrics.jsonl's" % (len(got), len(tags)))

    def test_a_kill_and_a_resume_show_every_step_once(self):
        reference, run = self.path("uninterrupted"), self.path("killed")
        self.assertExit(mbtest.run(train_args(self.data, reference), timeout=300), 0)
        killed = mbtest.run(train_args(self.data, run), timeout=300,
                            env={"MEGABATCH_FAULT_DIE_STEP": "0:%d" % DIE_AFTER})
        self.assertEqual(killed.returncode, -9, killed)
        self.assertExit(mbtest.run(train_args(self.data, run), timeout=300), 0, "from step %d" % CHECKPOINT_EVERY)
        files = self.reader.files(run)
        self.assertEqual(len(files), 2, files)
        events, _ = self.reader.events(files[1])
        self.assertEqual(events[1].session_log.status, self.reader.pb.SessionLog.START)
        self.assertEqual(events[1].step, CHECKPOINT_EVERY + 1)
        got, _ = self.reader.scalars(run)
        self.assertTrue(all(len(v) == 1 for v in got.values()), [k for k, v in got.items() if len(v) > 1])
        losses = {step: v[0] for (tag, step), v in got.items() if tag == "train/loss"}
        self.assertEqual(sorted(losses), list(range(1, STEPS + 1)))
        want = mbtest.train_losses(reference)
        for step in range(1, STEPS + 1):
            np.testing.assert_allclose(losses[step], want[step], rtol=max(mbtest.RUN_RTOL, 1e-6), err_msg=str(step))
        # The killed run's steps 11-13 are in its file, and purged: the resumed run trained them again.
        first, _ = self.reader.events(files[0])
        self.assertIn(DIE_AFTER, [e.step for e in first if e.HasField("summary")])
        # The finished run, run again, trains nothing and repeats no step: what it adds (its
        # memory plan, as in metrics.jsonl) is new.
        self.assertExit(mbtest.run(train_args(self.data, run), timeout=300), 0)
        again, _ = self.reader.scalars(run)
        self.assertTrue(all(len(v) == 1 for v in again.values()), [k for k, v in again.items() if len(v) > 1])
        self.assertEqual(sorted(k for k in again if k[0].startswith("train/")),
                         sorted(k for k in got if k[0].startswith("train/")))
        self.assertEqual(sorted(again), sorted(expected_scalars(run)))

    def test_the_switch_turns_them_off(self):
        run = self.path("off")
        self.assertExit(mbtest.run(train_args(self.data, run, "train.max_steps=3", "run.tensorboard=false"),
                                   timeout=300), 0)
        self.assertFalse(os.path.exists(os.path.join(run, "tensorboard")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
