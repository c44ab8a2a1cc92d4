"""The support matrix counts a leg's tests from pytest's JUnit XML, whatever the verbosity asked
for, and a leg in which no test passed is never reported as ok."""

import subprocess
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from matrix import junit_counts  # noqa: E402

SAMPLE = """
import pytest

def test_passes(): pass
def test_passes_too(): pass
def test_fails(): assert False
@pytest.mark.skip(reason="shown as skipped")
def test_skipped(): pass
"""


def test_counts_come_from_a_real_pytest_runs_junit_xml_even_at_minus_qq(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    xml = tmp_path / "junit.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-qq",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:django",
            f"--junitxml={xml}",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "passed" not in done.stdout  # -qq prints no summary line: the XML still counts
    assert junit_counts(xml) == {"passed": 2, "failed": 1, "errors": 0, "skipped": 1}


def test_no_xml_no_counts(tmp_path):
    assert junit_counts(tmp_path / "missing.xml") == {}
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite tests=")
    assert junit_counts(tmp_path / "cut.xml") == {}
