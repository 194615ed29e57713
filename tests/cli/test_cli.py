"""The megabatch command line: help, version, exit codes, config errors, overrides, mpirun."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402


class CliTest(mbtest.TempDirTestCase):
    def test_version_and_help(self):
        r = mbtest.run(["--version"])
        self.assertExit(r, 0, "megabatch ", "LibTorch")
        r = mbtest.run(["--help"])
        self.assertExit(r, 0, "train", "eval", "predict", "sample", "data", "inspect", "exit codes")
        r = mbtest.run(["train", "--help"])
        self.assertExit(r, 0, "--config", "--print-config")

    def test_no_command_is_usage_error(self):
        self.assertExit(mbtest.run([]), 2, "usage")

    def test_unknown_command_suggests(self):
        self.assertExit(mbtest.run(["trian"]), 2, "unknown command 'trian'", "did you mean megabatch train?")

    def test_unknown_option_suggests(self):
        r = mbtest.run(["train", "--confg", "x.yaml"])
        self.assertExit(r, 2, "unknown option --confg", "did you mean --config?")

    def test_misspelled_key_in_override_suggests_real_name(self):
        r = mbtest.run(["train", "--config", mbtest.config_path("demo.yaml"), "optim.lerning_rate=1"])
        self.assertExit(r, 2, "optim.lerning_rate", "did you mean optim.lr?")

    def test_misspelled_key_in_file_names_file(self):
        cfg = self.write("bad.yaml", "train:\n  global_bach: 8\n")
        r = mbtest.run(["train", "--config", cfg])
        self.assertExit(r, 2, "bad.yaml", "train.global_bach", "did you mean train.global_batch?")

    def test_wrong_type_and_range_name_key_and_value(self):
        cfg = self.write("c.yaml", "optim:\n  lr: fast\n")
        self.assertExit(mbtest.run(["train", "--config", cfg]), 2, "optim.lr", "'fast'")
        self.assertExit(mbtest.run(["train", "--config", mbtest.config_path("demo.yaml"), "model.dropout=2"]),
                        2, "model.dropout = 2")

    def test_missing_config_file(self):
        r = mbtest.run(["train", "--config", self.path("nope.yaml")])
        self.assertExit(r, 2, "cannot read config file", "nope.yaml")

    def test_print_config_resolves_overrides(self):
        r = mbtest.run(["train", "--config", mbtest.config_path("demo.yaml"), "optim.lr=0.0042",
                        "train.max_steps=7", "--print-config"])
        self.assertExit(r, 0, "lr: 0.0042", "max_steps: 7", "canonical_shards:")

    def test_help_config_lists_every_section(self):
        r = mbtest.run(["train", "--help-config"])
        self.assertExit(r, 0, "optim.lr", "train.global_batch", "data.canonical_shards", "dist.bucket_mb")

    def test_config_error_under_mpirun_reaches_every_rank(self):
        r = mbtest.mpirun(2, ["train", "--config", mbtest.config_path("demo.yaml"), "optim.lerning_rate=1"])
        self.assertEqual(r.returncode, 2, repr(r))
        for rank in ("r0/2", "r1/2"):
            self.assertIn("[%s] [app] error" % rank, r.output, repr(r))
        self.assertIn("did you mean optim.lr?", r.output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
