"""Faults of `audit.power` and of a hand-edited `conf/policy` YAML: each one clear line on stderr, a
non-zero exit and no traceback (docs/faults.md)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit import power

REPO = Path(__file__).resolve().parents[1]


def _doc(rewards) -> dict:
    return {"version": 1, "settings": {"n": 2}, "rewards": rewards}


@pytest.mark.parametrize("rewards, words", [
    pytest.param({"a": {"seeds": []}}, "holds no `seeds` mapping", id="seeds-a-list"),
    pytest.param({"a": []}, "holds no `seeds` mapping", id="reward-a-list"),
    pytest.param({"a": {"seeds": {"zero": {"iterations": {}}}}}, "seed key 'zero' is not an integer", id="seed-key"),
    pytest.param({"a": {"seeds": {"0": {"iterations": {"0": []}}}}}, "no `metrics` mapping", id="iteration-a-list"),
])
def test_power_audit_of_another_shape_is_one_line(tmp_path, capsys, rewards, words):
    f = tmp_path / "audit.json"
    f.write_text(json.dumps(_doc(rewards)))
    assert power.main(["--audit", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and str(f) in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, words", [
    pytest.param(["--valid-effect", "0"], "--valid-effect=0.0: expected a fall > 0", id="valid-effect-0"),
    pytest.param(["--pref-effect", "0"], "--pref-effect=0.0: expected a fall > 0", id="pref-effect-0"),
    pytest.param(["--max-environments", "0"], "--max-environments=0: expected an integer >= 2", id="max-envs-0"),
])
def test_power_settings_no_search_can_answer_are_refused(capsys, argv, words):
    assert power.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_power_ctrl_c_is_one_line_and_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(power, "coverage", interrupted)
    assert power.main(["--coverage", "-k", "6"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == "audit.power: interrupted (Ctrl-C); nothing was written"


def test_a_policy_yaml_that_does_not_parse_is_one_line(tmp_path, monkeypatch):
    from selfplay.models import config as MC

    (tmp_path / "broken.yaml").write_text("name: broken\n  hf_id: [\n")
    monkeypatch.setattr(MC, "POLICY_DIR", tmp_path)
    with pytest.raises(ValueError) as e:
        MC.PolicyConfig.named("broken")
    assert str(e.value).startswith(f"{tmp_path / 'broken.yaml'}:2: not valid YAML (")
    assert "\n" not in str(e.value)


def test_a_hydra_group_yaml_that_does_not_parse_is_one_line(tmp_path):
    """Through `selfplay.cli.hydra_main`, as `python -m selfplay.train +policy=NAME` composes it."""
    (tmp_path / "conf" / "policy").mkdir(parents=True)
    (tmp_path / "conf" / "config.yaml").write_text("x: 1\n")
    (tmp_path / "conf" / "policy" / "broken.yaml").write_text("name: broken\n  hf_id: [\n")
    (tmp_path / "app.py").write_text(
        "import hydra\nfrom selfplay.cli import hydra_main\n"
        "@hydra.main(config_path='conf', config_name='config', version_base='1.3')\n"
        "def run(cfg):\n    print(cfg)\n"
        "hydra_main(run, 'app')\n")
    r = subprocess.run([sys.executable, str(tmp_path / "app.py"), "+policy=broken"], capture_output=True, text=True,
                       cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1
    assert r.stderr.strip() == (f"app: error: {tmp_path / 'conf' / 'policy' / 'broken.yaml'}:2: not valid YAML "
                                "(mapping values are not allowed here); fix that file")
