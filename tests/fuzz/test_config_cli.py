"""Fuzz the configuration files and the command line: ``v05.train.config.load_config`` (YAML files and dotted
overrides), ``v05.grid.spec.load_grid`` (grid files), the report loaders, and ``v05.cli.main`` for every
subcommand (train, demo, report, simulate, prior eval, bench core / priors / train / matrix).

Contract: ``load_config`` and the loaders raise ``ValueError`` naming the field or file (a config that loads has only
finite numbers); ``main(argv)`` returns 0, or a non-zero code with one error line on stderr and never a traceback
(argparse's own usage errors exit 2 with its usage line and one error line). No run trains: ``v05.train.loop.train``
is replaced by a stub that records the config it was given.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz._contract import call, fuzz_settings, non_finite, scratch_dirs, tick
from tests.strategies import SEEDS, TEXT_SAMPLES, jsonl_text, pick

pytest.importorskip("omegaconf")
pytest.importorskip("torch")

from v05.cli import main  # noqa: E402
from v05.grid.spec import load_grid  # noqa: E402
from v05.report.runs import find_run_dirs, group_runs, load_runs, mean_curve, summary_table  # noqa: E402
from v05.train.config import TrainConfig, load_config, packaged_configs  # noqa: E402

pytestmark = pytest.mark.fuzz

fresh_dir, _remove_scratch = scratch_dirs("v05-fuzz-cli-")



def schema_keys(cls: type = TrainConfig, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, type) of every leaf field of the config schema."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            out += schema_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", hints[f.name]))
    return out


KEYS = schema_keys()
BAD_TEXT = ("abc", "", "null", "1.5", "-1", "0", "1e400", "nan", "inf", "-inf", ".nan", ".inf", "-.inf", "[1, 2",
            "{a: 1}", "[]", "{}",
            "${missing.key}", "${train.steps}", "é😀", "true", "2**64", "18446744073709551617", "'quoted'",
            "!!python/object/apply:os.system ['true']")  # fmt: skip
"""Override values that are wrong for most fields (OmegaConf parses them as YAML scalars)."""
GOOD_TEXT = {
    int: ("0", "1", "2", "3", "8", "64"), float: ("0.0", "1e-6", "0.5", "1.0", "100.0"), bool: ("true", "false"),
    str: ("grpo", "v05", "osla", "history", "arithmetic", "x"),
}  # fmt: skip
OPTION_KEYS = {
    "estimator.options": ("scale", "eps", "n0", "loo", "guard_level", "lambda_", "bogus"),
    "allocator.options": ("k", "k_init", "k_max", "c", "schedule", "batch_size", "bogus"),
    "prior.options": ("backend", "head", "context_size", "cache_dir", "bogus"),
    "task.options": ("n_train", "n_eval", "n_val", "max_digits", "dataset", "path", "bogus"),
}
MALFORMED = ("=", "novalue", "a..b=1", "train.steps", "train.steps==1", "+train.x=1", "~train.steps", ".=1",
             "train.steps=1=2", "trаin.steps=1", "train.=3", " train.steps = 3", "train.steps.x=1", "=1")  # fmt: skip


def value_text(rng: np.random.Generator, typ: object) -> str:
    """An override value for a field of type ``typ``: mostly valid, else one of ``BAD_TEXT``."""
    args = typing.get_args(typ)
    if (typ is float or float in args) and rng.random() < 0.3:
        return pick(rng, ("nan", "inf", "-inf", ".nan", ".inf", "1e400", "-1e400"))  # non-finite numbers
    if rng.random() < 0.4:
        return pick(rng, BAD_TEXT)
    if typing.get_origin(typ) is typing.Literal:
        return str(pick(rng, args))
    base = next((a for a in (int, float, bool, str) if typ is a or a in args), str)
    if type(None) in args and rng.random() < 0.2:
        return "null"
    return pick(rng, GOOD_TEXT[base])


def messy_overrides(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` dotted overrides: schema fields, estimator/allocator/prior/task options, or malformed strings."""
    out = []
    for _ in range(n):
        u = rng.random()
        if u < 0.6:
            key, typ = pick(rng, KEYS)
            out.append(f"{key}={value_text(rng, typ)}")
        elif u < 0.85:
            section = pick(rng, tuple(OPTION_KEYS))
            out.append(f"{section}.{pick(rng, OPTION_KEYS[section])}={value_text(rng, pick(rng, (int, float, str)))}")
        else:
            out.append(pick(rng, MALFORMED))
    return out


CONFIG_NAMES = (None, None, *sorted(packaged_configs()), "demo-nope", "", "../../etc/passwd")


def check_config(cfg: TrainConfig) -> None:
    """A loaded config holds finite numbers only."""
    found = non_finite(cfg, "config")
    assert found is None, f"load_config accepted a non-finite number: {found}"


@fuzz_settings(110)
@given(st.sampled_from(CONFIG_NAMES), st.integers(0, 4), st.booleans(), SEEDS)
def test_load_config_overrides_raise_only_valueerror(config, n_overrides, quick, seed):
    """A packaged config (or none, or an unknown name) with messy dotted overrides: a TrainConfig with finite
    numbers, or a one-line ValueError."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    cfg, err = call(load_config, config, messy_overrides(rng, n_overrides), quick=quick, allow_nan=("output",))
    if err is None:
        check_config(cfg)
    else:
        assert "\n" not in str(err).strip(), f"multi-line error: {err}"


YAML_MUTATIONS = ("none", "none", "none", "tabs", "unclosed", "python_tag", "list_top", "scalar_top", "binary",
                  "duplicate", "empty", "deep", "reward_range_01", "alias", "bom", "long")  # fmt: skip


def nested(pairs: list[str]) -> dict[str, object]:
    """``["a.b=1", ...]`` as a nested mapping ``{"a": {"b": "1"}}`` (later keys win; clashes are dropped)."""
    root: dict[str, object] = {}
    for item in pairs:
        key, _, value = item.partition("=")
        parts = key.split(".")
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[parts[-1]] = value
    return root


def yaml_text(rng: np.random.Generator, mutation: str) -> bytes:
    """A config file: a mapping of schema keys with messy values, then broken as ``mutation`` says."""
    import yaml

    body = nested(messy_overrides(rng, int(rng.integers(0, 6))))
    text = yaml.safe_dump(body, allow_unicode=True) if body else ""
    if mutation == "tabs":
        text = "train:\n\tsteps: 3\n"
    elif mutation == "unclosed":
        text += "estimator: {name: grpo\n"
    elif mutation == "python_tag":
        text += "name: !!python/object/apply:os.system ['true']\n"
    elif mutation == "list_top":
        text = "- train\n- steps\n"
    elif mutation == "scalar_top":
        text = pick(rng, ("3\n", "grpo\n", "null\n", "~\n"))
    elif mutation == "binary":
        return b"\x80\x04\x95" + text.encode()
    elif mutation == "duplicate":
        text += "train:\n  steps: 3\ntrain:\n  steps: 4\n"
    elif mutation == "empty":
        text = ""
    elif mutation == "deep":
        text = "a:" + " {b:" * 60 + " 1" + "}" * 60 + "\n"
    elif mutation == "reward_range_01":
        text = "train:\n  reward_range: 01\n"
    elif mutation == "alias":
        text = "x: &a {steps: 3}\ntrain: *a\n"
    elif mutation == "bom":
        text = "\ufeff" + text
    elif mutation == "long":
        text = f"name: {'é' * 5000}\n"
    return text.encode("utf-8", "surrogatepass")


@fuzz_settings(80)
@given(st.sampled_from(YAML_MUTATIONS), st.integers(0, 2), SEEDS)
def test_load_config_files_raise_only_valueerror(mutation, n_overrides, seed):
    """A YAML config file with messy keys and values, or not YAML at all: a TrainConfig or a one-line ValueError
    (python tags are refused, never executed)."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    path = fresh_dir() / pick(rng, ("c.yaml", "é😀.yaml", "c.yml", "c"))
    path.write_bytes(yaml_text(rng, mutation))
    cfg, err = call(load_config, str(path), messy_overrides(rng, n_overrides), allow_nan=("output",))
    if err is None:
        check_config(cfg)
        assert mutation != "python_tag"


def grid_document(rng: np.random.Generator) -> object:
    """A grid file's content (see ``load_grid``): mostly well-formed, with messy entries."""
    methods = {"grpo4": "demo-grpo4", "v05": {"config": "demo-v05", "overrides": messy_overrides(rng, 1)}}
    doc: dict[str, object] = {
        "name": pick(rng, ("g", "é😀", "", None, 3)),
        "seeds": pick(rng, ([0], [0, 1], [], [0, 0], ["a"], 3, [True], None)),
        "reference": pick(rng, ("grpo4", "v05", "nope", None, ["grpo4"])),
        "tasks": pick(rng, ({"easy": {"regime": "easy"}}, {"t": {"regime": "bogus"}}, {}, [], {"a b": {}},
                            {"t": {"overrides": ["x"]}}, {"t": None}, {".t": {}})),
        "methods": pick(rng, (methods, {}, {"m": 3}, {"m": {"config": "demo-nope"}}, {"m": {"family": "x",
                                                                                            "config": "demo-v05"}})),
    }  # fmt: skip
    if rng.random() < 0.3:
        doc["quick"] = pick(rng, ({"seeds": [0]}, {"methods": [{"a": 1}]}, {"methods": ["nope"]}, [], {"x": 1}))
    if rng.random() < 0.3:
        doc["tuning"] = pick(rng, ({"methods": ["grpo4"], "settings": {"s": {"batch_scale": 0.5}}},
                                   {"methods": [["grpo4"]], "settings": {"s": {}}}, {"seed": 0, "methods": ["v05"]},
                                   {"methods": ["grpo4"], "settings": {"s": {"batch_scale": "x"}}}, 3))  # fmt: skip
    if rng.random() < 0.2:
        doc[pick(rng, ("store", "overrides", "bogus", "description"))] = pick(rng, ("x", ["a=1"], None, 3, ["x"]))
    return doc if rng.random() < 0.9 else pick(rng, ([1, 2], "text", None, 3))


@fuzz_settings(150)
@given(st.booleans(), SEEDS)
def test_load_grid_raises_only_valueerror(as_yaml, seed):
    """A grid file with messy entries (or not YAML): a Grid or a one-line ValueError."""
    import yaml

    tick(__name__)
    rng = np.random.default_rng(seed)
    doc = grid_document(rng)
    path = fresh_dir() / "grid.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True) if as_yaml else pick(rng, ("{", "a: [", "\t-", "")))
    call(load_grid, path, allow_nan=("output",))


METRIC_VALUES = (0.1, 0.5, 1.0, 0, 7, -1.0, 1e308, -1e308, float("nan"), float("inf"), None, "x", True, [1], {})


def metrics_rows(rng: np.random.Generator, n: int) -> list[object]:
    """metrics.jsonl rows: steps with rollouts and eval pass rates, some fields odd, some steps repeated."""
    rows: list[object] = []
    rollouts = 0.0
    for i in range(n):
        rollouts += float(rng.integers(1, 50))
        row: dict[str, object] = {"step": int(rng.integers(0, n + 1)) if rng.random() < 0.2 else i + 1,
                                  "rollouts_total": rollouts, "eval_pass_rate": float(rng.random()),
                                  "compute_total": rollouts * 10, "wall_time": float(i)}  # fmt: skip
        if rng.random() < 0.2:
            row[pick(rng, tuple(row))] = pick(rng, METRIC_VALUES)
        rows.append(row if rng.random() < 0.97 else pick(rng, ([], "text", None)))
    return rows


def fake_runs(rng: np.random.Generator) -> list[Path]:
    """Run directories with messy metrics.jsonl and config.yaml files (or none of them)."""
    root = fresh_dir()
    paths = []
    for i in range(int(rng.integers(1, 4))):
        run = root / f"run{i}"
        run.mkdir()
        if rng.random() < 0.95:
            rows = metrics_rows(rng, int(rng.integers(0, 6)))
            text = jsonl_text(rng, rows, p_bad=0.1) if rng.random() < 0.5 else "".join(
                json.dumps(r) + "\n" for r in rows)  # fmt: skip
            (run / "metrics.jsonl").write_text(text, encoding="utf-8", errors="surrogatepass")
        if rng.random() < 0.8:
            config = pick(rng, ("name: grpo4\nseed: 0\n", "name: v05\nseed: 1\n", "name: grpo4\nseed: 0\n", "[1]\n",
                                "name: [a]\n", ":", "seed: x\n", "", "name: !!python/name:os.system\n"))
            (run / "config.yaml").write_text(config)
        paths.append(run)
    return paths if rng.random() < 0.8 else [root]


@fuzz_settings(200)
@given(st.sampled_from((None, 0.0, 0.3, 1.0, 1.5, float("nan"), -0.1)), st.sampled_from((None, "grpo4", "v05", "x")),
       SEEDS)  # fmt: skip
def test_report_loaders_raise_only_valueerror(target, reference, seed):
    """Run directories with messy metrics and configs through load_runs → summary_table → mean_curve: a
    ValueError, or rows and curves whose numbers are finite (None where a method does not log a value)."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    runs, err = call(lambda: load_runs(find_run_dirs(fake_runs(rng))), allow_nan=("output",))
    if err is not None:
        return
    groups = group_runs(runs)
    call(summary_table, groups, target=target, reference=reference)
    for members in groups.values():
        call(mean_curve, members, "rollouts_total", smooth=pick(rng, (1, 2)))


# -- the command line -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_training():
    """Replace the trainer by a stub (no run trains), bench's import timer by a constant, and hide verl (bench core
    would import it for its anchors: seconds, not input handling)."""
    import v05.bench
    import v05.train.loop

    calls: list[object] = []

    def fake_train(cfg, run_dir, *, resume=False, log=None):
        calls.append(cfg)
        return SimpleNamespace(steps=0, rollouts_total=0, eval_pass_rate=0.0, run_dir=run_dir, interrupted=False)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(v05.train.loop, "train", fake_train)
        mp.setattr(v05.bench, "import_time", lambda repeats=5: v05.bench.spread([0.1]))
        mp.setitem(sys.modules, "verl", None)
        yield calls


def tiny_v0_dir() -> Path:
    """A V0 directory of 8 prompts, one snapshot (the CLI cases that load V0 data stay fast)."""
    root = fresh_dir()
    (root / "prompts.json").write_text(json.dumps({f"ds_{i}": f"what is {i}+{i}? é" for i in range(8)}))
    rows = [{"id": i, "score": (i % 3 - 1) * 0.6, "model": "m", "step": 1, "dataset": "ds"} for i in range(8)]
    (root / "context.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[6:]))
    return root


def build_argv(rng: np.random.Generator, head: list[str], specs: list[tuple[str, tuple, tuple, float]]) -> list[str]:
    """``head`` + flags: each spec ``(flag, valid values, bad values, p)`` is present with probability p (1: always)
    with a valid value; in 60% of the cases one present flag gets a bad value instead (a flag value "" means a
    switch without a value)."""
    chosen = [spec for spec in specs if rng.random() < spec[3]]
    bad = int(rng.integers(len(chosen))) if chosen and rng.random() < 0.6 else -1
    argv = list(head)
    for i, (name, good, wrong, _) in enumerate(chosen):
        value = pick(rng, wrong if i == bad and wrong else good)
        argv += [name] if value == "" else [str(value)] if name == "" else [name, str(value)]  # "": positional
    return argv


def argv_for(command: str, rng: np.random.Generator, tmp: Path, v0: Path) -> list[str]:
    """A command line for ``command``: valid flags with, usually, one bad value (see :func:`build_argv`)."""
    out = str(tmp / pick(rng, ("out", "é😀", "a/b")))
    if command == "simulate":
        return build_argv(rng, ["simulate", "--quiet", "--no-figure", "--n-batches", "1"], [
            ("--population", ("uniform", "bimodal", "beta:0.5:0.5"), ("beta:0:1", "beta:x", "nope", "v0"), 1.0),
            ("--n-prompts", (2, 3), (0, -1), 1.0),
            ("--reps", (2,), (1, 0, -2), 1.0),
            ("--ks", ("1", "2", "1,2"), ("0", "a", "4,", "300", ""), 1.0),
            ("--estimators", ("grpo", "grpo,v05", "rloo,dbb", "v05_eb:loo=true", "oracle"),
             ("poise", "nope", "grpo:scale=bogus", "v05_eb:k=1", "", "grpo,,v05"), 1.0),
            ("--allocators", ("fixed", "osla", "fixed,sara", "dps", "fixed:k=2", "prior_select", "greso"),
             ("nope", "osla:schedule=bogus", "sara:tau_lo=x", "fixed:k=3"), 1.0),
            ("--prior", ("context_mean", "oracle_noise:0.1", "oracle:noise=0.2,bias=0.1", "history"),
             ("oracle_noise:abc", "bogus", "oracle:halluc=2", "oracle:noise=-1"), 1.0),
            ("--noise-sweep", ("none",), ("x", "-1", "nan", "0.1,"), 1.0),
            ("--seed", (0, 7), (-1, 2**70, "x"), 0.2),
            ("--json", (tmp / "r.json",), (tmp, tmp / "missing" / "r.json"), 0.2),
            ("--v0-data", (tmp / "missing",), (), 0.05),
        ])  # fmt: skip
    if command == "report":
        return build_argv(rng, ["report", *map(str, fake_runs(rng)), "--out", out], [
            ("--target", (0.3, 0.0, 1.0), (1.5, "nan", -1, "x"), 0.3),
            ("--reference", ("grpo4", "v05"), ("nope", ""), 0.2),
            ("--title", TEXT_SAMPLES, (), 0.2),
        ])  # fmt: skip
    if command == "prior":
        return build_argv(rng, ["prior", "eval", "--cache-dir", str(tmp / "cache")], [
            ("--v0-data", (v0,), (tmp / "missing", tmp), 1.0),
            ("--providers", ("running_mean", "history", "running_mean,history", "v0", "combined"),
             ("bogus", "", ",", "probe"), 1.0),
            ("--backend", ("tfidf",), ("bogus", "", "v0_adapter"), 1.0),
            ("--folds", (2, 3), (1, 0, -3), 0.5),
            ("--head", ("krr", "knn"), ("bogus", "tabpfn"), 0.3),
            ("--protocol", ("offline", "online", "offline,online"), ("x", "", ","), 0.3),
            ("--batch-size", (1, 2), (0, -1), 0.3),
            ("--json", (tmp / "r.json",), (tmp,), 0.2),
        ])  # fmt: skip
    if command == "bench":
        which = pick(rng, ("core", "core", "priors", "train", "matrix"))
        if which == "core":
            return build_argv(rng, ["bench", "core", "--no-verl-loop"], [
                ("--n-rollouts", (20, 8), (0, -5, 1), 1.0), ("--n-groups", (5, 2), (0, 30, -1), 1.0),
                ("--repeats", (1,), (0, -1), 1.0), ("--json", (tmp / "b.json",), (tmp,), 0.2),
            ])  # fmt: skip
        if which == "priors":  # never a valid size: the encoder is never loaded here
            return ["bench", "priors", "--n-prompts", str(pick(rng, (10**6, 5000))), "--repeats",
                    str(pick(rng, (0, -1, 1))), "--backend", pick(rng, ("tfidf", "bogus"))]  # fmt: skip
        if which == "train":
            return build_argv(rng, ["bench", "train", "--out", out], [
                ("--window-s", (0.5, 0, -1, "nan"), (), 1.0), ("--repeats", (0, 1), (), 0.5),
                ("--configs", ("demo-nope", ""), (), 0.5),
            ]) + messy_overrides(rng, 1)  # fmt: skip
        grid = tmp / "grid.yaml"
        grid.write_text(json.dumps(grid_document(rng)) if rng.random() < 0.9 else "{")
        return build_argv(rng, ["bench", "matrix", "--report-only", "--out", out, "--store", "none"], [
            ("", (str(grid),), (str(tmp / "missing.yaml"),), 1.0), ("--workers", (1,), (0, -1), 0.3),
            ("--tasks", ("easy",), ("nope",), 0.3),
        ])  # fmt: skip
    if command == "train":
        config = tmp / "c.yaml"
        config.write_bytes(yaml_text(rng, pick(rng, YAML_MUTATIONS)))
        return build_argv(rng, ["train", "--out", out], [
            ("--config", (config, "demo-grpo4", "demo-v05"), ("demo-nope", tmp / "missing.yaml", tmp), 0.9),
            ("--quick", ("",), (), 0.3), ("--resume", ("",), (), 0.2),
        ]) + messy_overrides(rng, int(rng.integers(0, 3)))  # fmt: skip
    if command == "demo":
        return build_argv(rng, ["demo", "--out", out], [
            ("--configs", ("demo-grpo4", "demo-grpo4,demo-v05"), ("demo-nope", "demo-grpo4,demo-grpo4", "", ","),
             0.8),
            ("--seeds", ("0", "0,1"), ("a", "", "1.5"), 0.5), ("--quick", ("",), (), 0.5),
        ]) + messy_overrides(rng, int(rng.integers(0, 2)))  # fmt: skip
    return pick(rng, ([], ["-v"], ["nope"], ["--version"], ["simulate", "--bogus"], ["prior"], ["bench"],
                      ["report"], ["train"], ["é😀"], ["-v", "bench", "core", "--repeats", "x"]))  # fmt: skip


def check_cli(code: int, err: str) -> None:
    """The CLI contract: 0, or a non-zero code with one error line and no traceback."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("INFO ", "WARNING ", "DEBUG "))]
    if code != 0:
        assert lines, f"exit {code} without an error message"
        assert lines[-1].startswith("v05") and "error:" in lines[-1], f"last stderr line is not an error: {lines}"
        if not lines[0].startswith("usage:"):  # argparse prints its usage line first
            assert len(lines) == 1, f"more than one error line: {lines}"


COMMANDS = ("simulate", "simulate", "report", "prior", "prior", "bench", "bench", "train", "train", "demo", "top")


@pytest.mark.usefixtures("no_training")
def test_cli_every_subcommand_exits_cleanly(capsys):
    """Every subcommand on messy argv: exit 0, or a non-zero code with a one-line error on stderr, never a
    traceback. (Wrapped so the module-scoped stubs are active while hypothesis runs.)"""
    v0 = tiny_v0_dir()

    @fuzz_settings(130)
    @given(st.sampled_from(COMMANDS), SEEDS)
    def run(command, seed):
        tick(__name__)
        rng = np.random.default_rng(seed)
        argv = argv_for(command, rng, fresh_dir(), v0)
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as done:  # argparse: usage errors exit 2 (and --help/--version exit 0)
            code = done.code if isinstance(done.code, int) else 2
        check_cli(code, capsys.readouterr().err)

    run()


@pytest.mark.parametrize("part", ["quick", "tuning"])
def test_grid_unhashable_methods_is_a_valueerror(tmp_path, part):
    """A grid whose quick.methods / tuning.methods holds a list is refused with a ValueError naming the entry."""
    grid = {"name": "g", "tasks": {"easy": {}}, "methods": {"grpo4": "demo-grpo4"}}
    grid[part] = {"methods": [["grpo4"]], "settings": {"s": {}}} if part == "tuning" else {"methods": [["grpo4"]]}
    path = tmp_path / "grid.yaml"
    path.write_text(json.dumps(grid))
    with pytest.raises(ValueError, match="methods"):
        load_grid(path)


def test_config_boundary_regression(tmp_path):
    """An override whose value is a python tag, and a non-finite number anywhere in the config, are ValueErrors
    naming the override or the field (a yaml ConstructorError traceback, and silently accepted NaN/inf, before)."""
    with pytest.raises(ValueError, match="override"):
        load_config(None, ["name=!!python/object/apply:os.system ['true']"])
    for override, field in (("optim.eps=.nan", "optim.eps"), ("optim.weight_decay=inf", "optim.weight_decay"),
                            ("poise.alpha=-inf", "poise.alpha"), ("optim.lr=1e400", "optim.lr"),
                            ("allocator.options={c: .nan}", "allocator.options.c")):  # fmt: skip
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            load_config(None, [override])


def test_cli_os_errors_are_one_line_regression(tmp_path, capsys):
    """A path of the wrong kind (--json naming a directory) exits 2 with one error line (IsADirectoryError escaped
    as a traceback before)."""
    code = main(["prior", "eval", "--providers", "running_mean", "--v0-data", str(tiny_v0_dir()), "--json",
                 str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len([ln for ln in err if not ln.startswith(("INFO", "WARNING"))]) == 1
    assert "Is a directory" in err[-1] and "Traceback" not in "\n".join(err)
