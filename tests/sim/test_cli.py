"""``v05 simulate`` in-process: a tiny-budget smoke run, and bad input → exit 2 with a one-line message."""

import json

import pytest

from v05.cli import main

CONTRACT = ("estimator", "allocator", "prior", "k", "mse", "rollouts_per_prompt", "zero_adv_frac", "grad_weight_var")


def test_simulate_smoke(tmp_path, capsys):
    """A tiny run exits 0 and writes results.json (contract keys, claims) and the PNG."""
    out = tmp_path / "run"
    code = main(
        [
            "simulate",
            "--ks",
            "2,4,16",
            "--reps",
            "2",
            "--estimators",
            "grpo,v05,v05_eb",
            "--allocators",
            "fixed,osla,dps",
            "--noise-sweep",
            "0,0.5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert data["results"] and all(all(k in r for k in CONTRACT) for r in data["results"])
    assert "targets" in data["claims"] and "prior_quality" in data["claims"]
    assert (out / "simulate.png").stat().st_size > 10_000
    assert "Claims" in capsys.readouterr().out


def test_simulate_json_path_and_synthetic(tmp_path):
    """--json writes there; a synthetic population works without V0 data; --no-figure draws nothing."""
    path = tmp_path / "x" / "r.json"
    code = main(
        [
            "simulate",
            "--population",
            "bimodal",
            "--n-prompts",
            "8",
            "--n-batches",
            "2",
            "--ks",
            "4",
            "--reps",
            "2",
            "--estimators",
            "grpo,v05",
            "--allocators",
            "fixed",
            "--noise-sweep",
            "none",
            "--prior",
            "context_mean,oracle:noise=0.2,bias=0.1",
            "--json",
            str(path),
            "--no-figure",
            "--quiet",
        ]
    )
    assert code == 0
    priors = {r["prior"] for r in json.loads(path.read_text())["results"]}
    assert priors == {"context_mean", "oracle:noise=0.2,bias=0.1"}


def test_simulate_any_v0_directory(tmp_path):
    """--v0-data accepts any V0-format directory; --splits picks query files; records carry the population."""
    from v05.datasets.v0 import bundled_v0_path

    src = bundled_v0_path()
    d = tmp_path / "v0"
    d.mkdir()
    (d / "prompts.json").write_text((src / "prompts.json").read_text())
    ctx = (src / "context.jsonl").read_text().splitlines()
    (d / "context.jsonl").write_text("\n".join(ctx[:600]) + "\n")  # the first snapshot's 512 rows and then some
    rows = (src / "train.jsonl").read_text().splitlines()
    (d / "train.jsonl").write_text("\n".join(rows[:40]) + "\n")
    (d / "test_query.jsonl").write_text("\n".join(rows[40:64]) + "\n")
    path = tmp_path / "r.json"
    argv = [
        "simulate",
        "--v0-data",
        str(d),
        "--splits",
        "train",
        "--ks",
        "4",
        "--reps",
        "2",
        "--estimators",
        "grpo,v05",
        "--allocators",
        "fixed",
        "--noise-sweep",
        "none",
        "--json",
        str(path),
        "--quiet",
    ]
    assert main(argv) == 0
    data = json.loads(path.read_text())
    assert data["config"]["population_prompts"] == 40
    assert all(r["population"] == "v0:v0:train" for r in data["results"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--prior", "bogus"],
        ["--prior", "oracle_noise:abc"],
        ["--estimators", "grpo,nope"],
        ["--allocators", "fixed,nope"],
        ["--ks", "0"],
        ["--ks", "a"],
        ["--ks", "4,"],
        ["--reps", "1"],
        ["--v0-data", "/nonexistent/v0dir"],
        ["--population", "nope"],
        ["--noise-sweep", "x"],
    ],
)
def test_simulate_bad_input_exit_2(argv, capsys, tmp_path):
    """Bad input is one line on stderr and exit code 2, no traceback."""
    code = main(
        ["simulate", "--quiet", "--no-figure", "--ks", "4", *argv]
        if "--ks" not in argv
        else ["simulate", "--quiet", "--no-figure", *argv]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("v05 simulate: error:") and "\n" not in err and "Traceback" not in err


def test_simulate_help_documents_every_option(capsys):
    """Every option of ``v05 simulate`` has a help string."""
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = capsys.readouterr().out
    for opt in (
        "--v0-data",
        "--splits",
        "--population",
        "--estimators",
        "--allocators",
        "--prior",
        "--ks",
        "--noise-sweep",
        "--reps",
        "--seed",
        "--out",
        "--json",
        "--figure",
        "--no-figure",
        "--quiet",
        "--no-equal-budget",
        "--n-prompts",
        "--n-batches",
    ):
        assert opt in text
