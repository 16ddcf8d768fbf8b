"""Claims about `v05 prior eval` (run in-process, cleanrl style)."""

import json

from v05.cli import main


def test_cli_prior_eval_writes_the_contract_json(tmp_path):
    """`v05 prior eval` exits 0 and writes results with the contract keys, incl. the context_cv split and a PNG."""
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["prior", "eval", "--providers", "running_mean,history", "--json", str(out), "--plot", str(png)])
    assert code == 0 and png.stat().st_size > 0
    results = json.loads(out.read_text())["results"]
    keys = {"provider", "split", "mse", "mae", "auc_within", "auc_global", "gauc_step", "calibration_slope", "n"}
    assert all(keys <= set(r) for r in results)
    assert {r["split"] for r in results} == {"context_cv", "train"}


def test_cli_unknown_provider_is_a_one_line_error(capsys):
    """An unknown provider exits 2 with the valid names."""
    assert main(["prior", "eval", "--providers", "nope"]) == 2
    assert "running_mean, history, v0, combined" in capsys.readouterr().err
    assert main(["prior", "eval", "--providers", "oracle"]) == 2  # a live-rollout bound: nothing to evaluate offline
    err = capsys.readouterr().err
    assert "extra rollouts of a live policy" in err and len(err.strip().splitlines()) == 1


def test_cli_v0_adapter_needs_its_paths(capsys):
    """--backend v0_adapter without the adapter checkpoint and encoder directory is a one-line error."""
    assert main(["prior", "eval", "--providers", "v0", "--backend", "v0_adapter"]) == 2
    assert "--v0-adapter" in capsys.readouterr().err
