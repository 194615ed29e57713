"""scripts/debian-mirror.sh: the Debian mirror a bootstrapped root (the trixie root, the image's
base, the fresh-machine stand-in) is made from is the one this machine's apt sources name, in
either of apt's formats, and third-party or disabled entries are passed over. Each case writes
apt sources into a temporary folder (APT_SOURCES_DIR) and asks the script. CTest:
py.scripts.debian_mirror.
"""
import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "debian-mirror.sh")


def ask(sources, which="", env=None):
    """(exit status, stdout, stderr) of debian_mirror WHICH over the given {relative path: text}."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "sources.list.d"))
        for name, text in sources.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        environ = {k: v for k, v in os.environ.items() if k != "MEGABATCH_TRIXIE_MIRROR"}
        environ.update(env or {}, APT_SOURCES_DIR=d)
        out = subprocess.run(["bash", "-c", '. "$0" && debian_mirror ' + which, SCRIPT], env=environ,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        return out.returncode, out.stdout.strip(), out.stderr


class DebianMirrorTest(unittest.TestCase):
    def test_one_line_sources_behind_a_proxy(self):
        sources = {"sources.list": "# a company proxy\n"
                   "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
                   "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] http://proxy.corp:3142/debian/ bookworm main\n"
                   "deb http://proxy.corp:3142/debian-security bookworm-security main\n"}
        self.assertEqual((0, "http://proxy.corp:3142/debian"), ask(sources)[:2])
        self.assertEqual((0, "http://proxy.corp:3142/debian-security"), ask(sources, "security")[:2])

    def test_deb822_sources_skip_disabled_and_third_party_stanzas(self):
        sources = {"sources.list.d/debian.sources":
                   "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n\n"
                   "Types: deb deb-src\nEnabled: no\nURIs: http://old.example/debian\nSuites: trixie\n\n"
                   "Types: deb\n# a comment inside the stanza\nURIs: http://mirror.example.com/debian\n"
                   "Suites: trixie trixie-updates\nComponents: main\n"}
        self.assertEqual((0, "http://mirror.example.com/debian"), ask(sources)[:2])

    def test_mirror_lists_are_passed_over(self):
        sources = {"sources.list": "deb mirror+file:/etc/apt/mirrors/debian.list bookworm main\n"
                   "deb http://ftp.example.org/debian bookworm main\n"}
        self.assertEqual((0, "http://ftp.example.org/debian"), ask(sources)[:2])

    def test_the_override_wins(self):
        sources = {"sources.list": "deb http://ftp.example.org/debian bookworm main\n"}
        self.assertEqual((0, "http://override.example/debian"),
                         ask(sources, env={"MEGABATCH_TRIXIE_MIRROR": "http://override.example/debian/"})[:2])

    def test_no_debian_source_says_what_to_do(self):
        status, out, err = ask({"sources.list": "deb https://deb.nodesource.com/node_20.x nodistro main\n"})
        self.assertNotEqual(0, status)
        self.assertEqual("", out)
        self.assertIn("no Debian archive mirror in the apt sources", err)
        self.assertIn("MEGABATCH_TRIXIE_MIRROR=", err)


if __name__ == "__main__":
    unittest.main()
