"""The top-level CLI: a missing optional dependency is one line naming the extra, never a traceback."""

import os
import subprocess
import sys

import pytest

import v05.sim.cli as sim_cli
from v05.cli import main


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("sklearn", ["prior", "eval", "--providers", "v0", "--backend", "tfidf"], "priors"),
        ("sentence_transformers", ["prior", "eval", "--providers", "v0"], "priors"),
        ("omegaconf", ["train", "--config", "demo-grpo4", "--out", "/tmp/v05-never"], "train"),
    ],
)
def test_missing_extra_is_one_line_naming_the_extra(blocked, argv, extra, tmp_path):
    """With `blocked` unimportable, the command exits 2 and stderr is one line with pip install 'v05[extra]'
    (an empty embedding cache, so the encoder is really needed)."""
    code = f"import sys; sys.modules[{blocked!r}] = None; from v05.cli import main; sys.exit(main({argv!r}))"
    env = {**os.environ, "V05_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith(("INFO", "WARNING"))]
    assert proc.returncode == 2, proc.stderr
    assert len(err) == 1 and f"pip install 'v05[{extra}]'" in err[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize("message", ["demo interrupted during runs/x (checkpoint saved; re-run to resume)", ""])
def test_interrupt_is_one_line_and_exit_130(monkeypatch, capsys, message):
    """A subcommand interrupted (Ctrl-C, or the grid's SIGTERM handler) exits 130 with one stderr line that keeps
    the interrupt's message (where it says how to resume), never a traceback."""
    def interrupted(args):
        raise KeyboardInterrupt(message) if message else KeyboardInterrupt

    real = sim_cli.register

    def register(sub):
        real(sub)
        for action in sub.choices.values():
            action.set_defaults(func=interrupted)

    monkeypatch.setattr(sim_cli, "register", register)
    assert main(["simulate", "--out", "/tmp/v05-never"]) == 130
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"v05 simulate: interrupted: {message or 'interrupted'}"]
