"""A sweep job that reaches its time limit is requeued and resumes from its last complete iteration.

`conf/hydra/launcher/submitit_slurm.yaml` requeues (max_num_timeout > 0). What a requeue does is the
same on both launchers of hydra-submitit-launcher: submitit signals the job `signal_delay_s` before
its limit, calls the launcher's `checkpoint` hook, which resubmits the same callable with the same
overrides, and the job's process exits. So the test runs the whole thing for real on submitit's
local executor (which requeues up to 3 times): `python -m selfplay.train -m hydra/launcher=
submitit_local` on a tiny random Llama, signalled as a timed-out job mid-run; the run must end
complete, each iteration trained once, none lost or repeated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from selfplay.config import CONF_DIR, PROJECT_ROOT

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def test_the_slurm_launcher_requeues_on_timeout():
    launcher = yaml.safe_load((CONF_DIR / "hydra" / "launcher" / "submitit_slurm.yaml").read_text())
    assert launcher["max_num_timeout"] > 0 and launcher["signal_delay_s"] > 0


def test_the_launchers_checkpoint_hook_resubmits_the_same_job():
    import submitit
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

    launcher = SlurmLauncher(**{k: v for k, v in yaml.safe_load(
        (CONF_DIR / "hydra" / "launcher" / "submitit_slurm.yaml").read_text()).items() if k != "_target_"})
    args = (["+policy=tiny-llama", "reward=generic", "seed=1"], "hydra.sweep.dir", 0, "job_id_for_0", {})
    delayed = launcher.checkpoint(*args)
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.function is launcher and delayed.args == args


ITERATIONS = 4


def job_processes(root: int) -> list:
    """The processes running the sweep's job (submitit's runner), below the sweep's own process."""
    import psutil

    return [p for p in psutil.Process(root).children(recursive=True)
            if "submitit.core._submit" in " ".join(p.cmdline())]


def job_logs(sweep) -> str:
    """Everything submitit's job wrote, both streams of every attempt."""
    return "".join(p.read_text(errors="replace") for p in sorted(sweep.rglob("*.err")) + sorted(sweep.rglob("*.out")))


@pytest.mark.slow
def test_a_timed_out_sweep_job_is_requeued_and_resumes(tmp_path):
    """The signal is sent by the test once iteration 2 is complete and logged (what the executor
    sends `signal_delay_s` before the limit; the job counts itself timed out), so the cut does not
    depend on how fast this machine trains. Waiting for the log line too, not only for `DONE`: the
    line follows the rename, and a signal between the two would lose it, reading as an iteration
    never trained."""
    import signal
    import time

    sweep, run = tmp_path / "sweep", tmp_path / "out" / "selfplay" / "generic" / "seed0"
    cmd = [sys.executable, "-m", "selfplay.train", "-m", "hydra/launcher=submitit_local",
           "hydra.launcher.timeout_min=10", "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1",
           f"hydra.sweep.dir={sweep}", "+policy=tiny-llama", "reward=generic", "reward.min_verdict_mass=0.0",
           "logger=none", f"iterations={ITERATIONS}", "k=2", "max_new_tokens=8", "max_train_envs=2",
           "margin=0.0", "pair_truncated=true", "lora.r=4", "lora.alpha=8", f"output_root={tmp_path / 'out'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(tmp_path / "sweep.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 600
            while not ((run / "iter_2" / "DONE").exists() and "iteration 2: " in job_logs(sweep)):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "sweep.log").read_text()[-3000:]
                time.sleep(0.2)
            for p in job_processes(proc.pid):
                p.send_signal(signal.SIGUSR2)
            assert proc.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    logs = job_logs(sweep)
    assert len([line for line in logs.splitlines() if line.startswith("submitit INFO") and "Requeued job" in line]) == 1, logs[-3000:]
    done = sorted(p.parent.name for p in run.glob("iter_*/DONE"))
    assert done == sorted(f"iter_{t}" for t in range(ITERATIONS + 1))
    for t in range(1, ITERATIONS + 1):
        assert json.loads((run / f"iter_{t}" / "metrics.json").read_text())["iteration"] == t
    # each iteration was trained by exactly one attempt: the one cut mid-iteration kept nothing of it
    # (a log line may reach both of submitit's files: each iteration must be logged as often as the others)
    trained = Counter(int(m) for m in re.findall(r"iteration (\d+): \d+ pairs of", logs))
    assert sorted(trained) == list(range(1, ITERATIONS + 1)) and len(set(trained.values())) == 1, trained
    assert not [p for p in run.iterdir() if p.name.startswith("iter_") and not (p / "DONE").exists()]
