"""A CUDA build of megabatch on a machine without a GPU (issue 26, label cuda-build).

Run by the CUDA build stage of scripts/test.sh inside the Debian 13 CUDA root (no GPU, no NVIDIA
driver, Note [cuDNN stand-in]). Only meaningful with a CUDA binary: the first test fails when
MEGABATCH_BIN is a CPU build, so this file cannot pass against the wrong binary.
  - `--version` names the CUDA and NCCL versions compiled in;
  - train.device=cuda exits 2 (a config error) saying that no GPU is visible and how to pass
    one through (docker --gpus all, apptainer --nv, Kubernetes nvidia.com/gpu, or
    train.device=cpu), and leaves no run behind;
  - train.device=auto trains on the CPU, says so once (rank 0, two ranks) and never loads
    NVML (LD_DEBUG shows every library the dynamic linker opens);
  - dist.backend=nccl is refused (exit 2) without a CUDA device;
  - the GPU-only tests fail rather than pass;
  - no run crashes at exit (signals, aborts, core dumps).
NVML's absence on a *GPU* machine (warned once, by rank 0) cannot be reached without a GPU.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

CONFIG = """
run:
  dir: {run_dir}
  log_every: 1
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
    - {{name: m5, window: 8}}
  canonical_shards: 10
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model:
  kind: lstm
  hidden: 16
  layers: 1
  head_hidden: 16
train:
  global_batch: 32
  max_steps: 6
  eval_every: 0
  precision: fp32
  threads: 1
optim:
  name: adamw
  lr: 0.01
"""

HINTS = ("docker run --gpus all", "apptainer exec --nv", "nvidia.com/gpu", "train.device=cpu")


class GpulessTest(mbtest.SeriesTrainingTestCase):
    def config(self, name):
        self.run_dir = os.path.join(self.tmp, name)
        return self.write(name + ".yaml", CONFIG.format(run_dir=self.run_dir, data=self.data))

    def train(self, np_, overrides, env=None):
        # Plain argument lists: the device under test is the point, so no test-device override.
        args = [mbtest.BIN, "train", "--config", self.config("run%d" % len(os.listdir(self.tmp)))]
        if np_ > 1:
            args = [mbtest.MPIEXEC, "-np", str(np_), "--oversubscribe"] + args
        r = mbtest._run(args + list(overrides), 600, env, None)
        self.assertEqual(mbtest.crash_signs(r.output), [], repr(r))
        self.assertGreaterEqual(r.returncode, 0, "killed by a signal:\n%r" % r)
        return r

    def test_version_names_cuda_and_nccl(self):
        r = mbtest.run(["--version"])
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertRegex(r.stdout, r"LibTorch 2\.\d+\.\d+.*, CUDA 1\d\.\d+, NCCL 2\.\d+\.\d+",
                         "not a CUDA build, or --version does not say so:\n%r" % r)

    def test_device_cuda_exits_2_with_the_reason_and_the_fixes(self):
        r = self.train(1, ["train.device=cuda"])
        self.assertEqual(r.returncode, 2, repr(r))
        self.assertIn("train.device = cuda, but", r.output)
        self.assertIn("no GPU visible", r.output)
        for hint in HINTS:
            self.assertIn(hint, r.output, repr(r))
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "checkpoints", "latest")))
        two = self.train(2, ["train.device=cuda"])
        self.assertEqual(two.returncode, 2, repr(two))
        self.assertIn("no GPU visible", two.output)

    def test_device_auto_trains_on_the_cpu_says_so_once_and_never_loads_nvml(self):
        r = self.train(2, ["train.device=auto"], env={"LD_DEBUG": "files"})
        self.assertEqual(r.returncode, 0, r.stdout[-3000:])
        said = [line for line in r.output.splitlines() if "train.device = auto: training on the CPU" in line]
        self.assertEqual(len(said), 1, "\n".join(said) or r.stdout[-3000:])
        self.assertIn("no GPU visible", said[0])
        self.assertIn("device cpu", r.output)
        self.assertEqual(len(mbtest.train_losses(self.run_dir)), 6)
        self.assertNotIn("libnvidia-ml", r.output, "NVML was loaded on the CPU")
        self.assertNotIn("GPU utilisation", r.output)
        # Without LD_DEBUG's noise: the CPU fallback is the only device message.
        quiet = self.train(1, ["train.device=auto"])
        self.assertEqual(quiet.returncode, 0, repr(quiet))
        self.assertNotIn("NVML", quiet.output)

    def test_nccl_backend_is_refused_without_a_cuda_device(self):
        for device in ("cpu", "auto"):
            r = self.train(2, ["train.device=" + device, "dist.backend=nccl"])
            self.assertEqual(r.returncode, 2, repr(r))
            self.assertIn("dist.backend = nccl needs a CUDA device, but this run trains on the CPU", r.output, repr(r))

    def test_gpu_only_tests_fail_rather_than_pass(self):
        gpu_tests = os.environ.get("MEGABATCH_GPU_TESTS_BIN")
        self.assertTrue(gpu_tests, "MEGABATCH_GPU_TESTS_BIN is not set (tests/CudaBuild.cmake sets it)")
        r = mbtest._run([gpu_tests], 300, None, None)
        self.assertNotEqual(r.returncode, 0, "the GPU-only tests passed without a GPU:\n%r" % r)
        self.assertIn("no usable CUDA device", r.output, repr(r))
        self.assertEqual(mbtest.crash_signs(r.output), [], repr(r))


if __name__ == "__main__":
    unittest.main(verbosity=2)
