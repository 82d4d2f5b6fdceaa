"""tools/device/check.sh refuses bad settings before it builds anything: exit 2 and a message
that names the setting and its value."""

import os
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "device", "check.sh")


def run_check(tmp_path, **env):
    environment = dict(os.environ, OUT=str(tmp_path / "out"), **env)
    return subprocess.run(["bash", SCRIPT], env=environment, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("env, message", [
    ({"PASSES": "0"}, "PASSES must be a whole number of compare.py passes, 1 or more, got '0'"),
    ({"ARCHIVE": "{out}/run.tgz"}, "ARCHIVE={out}/run.tgz lies inside OUT={out}"),
    ({"ARCHIVE": "{tmp}/missing/run.tgz"}, "ARCHIVE={tmp}/missing/run.tgz: its folder does not"),
])
def test_bad_settings_are_refused_by_name(tmp_path, env, message):
    paths = {"out": str(tmp_path / "out"), "tmp": str(tmp_path)}
    result = run_check(tmp_path, **{k: v.format(**paths) for k, v in env.items()})
    assert result.returncode == 2
    assert message.format(**paths) in result.stderr
