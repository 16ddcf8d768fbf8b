"""Prepared GPU check of v05: ``v05 train`` in bf16, the vLLM engine, the priors' encoders, the verl adapter's tests.

Usage (one CUDA GPU, from the repository root; see benchmarks/gpu/README.md for the packages to carry):

    PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/gpu/check.py   # writes $OUT (or benchmarks/results/gpu)
    PYTHONPATH=src python3 benchmarks/gpu/check.py --cpu-smoke --out /tmp/chk   # dry run of this script on CPU

Parts (each in its own subprocess with a time limit, so a crash or a hang in one does not stop the others):

1. ``env``: Python, torch, CUDA, the GPU, and which optional packages (vllm, verl, omegaconf) are importable.
2. ``model``: a ~50 M-parameter Qwen2 causal LM over v05's char tokenizer, randomly initialised and saved locally
   (no hub), in bf16.
3. ``hf_train``: ``v05 train`` in-process for ``--steps`` steps on the arithmetic task with the HF engine, the policy
   in bf16 on CUDA; checks every loss and gradient norm is finite and that the first PPO epoch's ratio is 1 ± 1e-3
   at every token (max |ρ − 1|) with no clipping (old log-probs recomputed by the training forward,
   ``train.recompute_old_logp=auto``); then the same run with ``recompute_old_logp=never`` reports the ratio and
   clip fraction the recompute removes.
4. ``vllm_engine``: if vllm imports — ``VLLMEngine`` on that model: rollout layout, vLLM's processed log-probs vs the
   policy's (T = 1, no truncation), and a weight sync after perturbing the policy (vLLM must follow the new weights).
5. ``vllm_train``: if vllm imports and ``GenerationConfig`` has an ``engine`` field — part 3 with
   ``generation.engine=vllm``.
6. ``priors``: the priors' torch paths on CUDA (formerly ``benchmarks/gpu_check.py``): a tiny random Qwen3 encoder
   (``HFEncoderBackend``) in fp32 and bf16 against the CPU fp32 reference, and the V0 adapter stack
   (``V0AdapterBackend``) on CUDA against CPU (max |Δ|, min cosine).
7. ``verl``: if verl imports and ``tests/adapters/test_verl.py`` exists — that test file under pytest.
8. ``lm_lora`` / ``lm_full``: if ``--lm-tokenizer`` names a folder (SmolLM2-135M-Instruct's tokenizer files, ~3.5 MB:
   the 93 MB GGUF does not fit the device's 64 MiB carry) — a model of SmolLM2-135M-Instruct's exact architecture
   (``LlamaForCausalLM``, 30 layers, hidden 576, GQA 9/3, vocabulary 49,152, tied embeddings; random weights) over its
   real BPE tokenizer and chat template, trained by ``v05 train`` on 2-digit add/sub rendered through the chat
   template, 64 prompts × 4 rollouts a step, in bf16 on CUDA: once with ``policy.lora={r: 8, alpha: 16}`` and once
   with every weight trained. Same checks as part 3, and the step's generate/update times at the real model's size.

A random policy scores ~0 on arithmetic, so GRPO's advantages are all 0; an entropy bonus (``loss.entropy_coef=0.01``)
keeps the gradient non-zero, so part 3 checks the mechanics (sampling, scoring, the bf16 forward/backward, a real
optimizer step, checkpointing), not learning.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PART_LIMITS_S = {"hf_train": 180, "vllm_engine": 210, "vllm_train": 210, "priors": 90, "verl": 120, "lm_lora": 150,
                 "lm_full": 150}
PARTS = ("hf_train", "vllm_engine", "vllm_train", "priors", "verl", "lm_lora", "lm_full")
RATIO_TOLERANCE = 1e-3
"""|first-epoch ratio − 1| allowed in bf16 when the old log-probs come from the training forward."""
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu"
"""Wall-clock limit of each subprocess part (a part also never outlives the global ``--budget``)."""
MODEL_SHAPES = {
    "gpu": {
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "max_position_embeddings": 256,
    },  # fmt: skip
    "cpu-smoke": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
    },  # fmt: skip
}
SMOLLM2_SHAPE = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}  # fmt: skip
"""SmolLM2-135M-Instruct's architecture, as its GGUF dequantises (``policy.name_or_path=smollm2-135m-instruct``)."""


# -- parts that run in this process -------------------------------------------------------------------------------
def part_env() -> dict:
    import torch

    out: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out |= {"gpu": props.name, "gpu_memory_gb": round(props.total_memory / 2**30, 1),
                "capability": f"{props.major}.{props.minor}", "bf16": torch.cuda.is_bf16_supported()}  # fmt: skip
    for name in ("transformers", "tokenizers", "omegaconf", "vllm", "verl", "safetensors", "tensorboard"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["missing_for_train"] = [m for m in ("omegaconf", "safetensors") if importlib.util.find_spec(m) is None]
    return {"status": "ok", **out}


def part_model(path: Path, shape: str, dtype: str) -> dict:
    import transformers

    from v05.train.policy import build_char_tokenizer

    tok = build_char_tokenizer()
    config = transformers.Qwen2Config(vocab_size=len(tok), tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                      **MODEL_SHAPES[shape])  # fmt: skip
    return save_random_model(transformers.Qwen2ForCausalLM, config, tok, path, dtype) | MODEL_SHAPES[shape]


def save_random_model(cls: type, config: object, tok: object, path: Path, dtype: str) -> dict:
    """``cls(config)`` with seed-0 random weights, saved in ``dtype`` with ``tok`` by v05's own ``save_policy``."""
    import torch

    from v05.train.policy import save_policy

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    save_policy(model.to(getattr(torch, dtype)), tok, path)
    n_params = sum(p.numel() for p in model.parameters())
    return {"status": "ok", "path": str(path), "architecture": cls.__name__, "params": n_params,
            "params_m": round(n_params / 1e6, 1), "dtype": dtype}  # fmt: skip


def part_lm_model(path: Path, tokenizer_dir: Path, dtype: str, *, tiny: bool) -> dict:
    """SmolLM2-135M-Instruct's architecture (random weights) over its real tokenizer and chat template, saved."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    template = tokenizer_dir / "chat_template.jinja"
    if not getattr(tok, "chat_template", None) and template.is_file():
        tok.chat_template = template.read_text()
    shape = MODEL_SHAPES["cpu-smoke"] | {"head_dim": 16} if tiny else SMOLLM2_SHAPE
    config = transformers.LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                      pad_token_id=tok.pad_token_id, rope_theta=100000.0, **shape)  # fmt: skip
    out = save_random_model(transformers.LlamaForCausalLM, config, tok, path, dtype)
    return out | {"vocab": len(tok), "chat_template": bool(getattr(tok, "chat_template", None)), **shape}


# -- parts that run in a subprocess -------------------------------------------------------------------------------
def train_overrides(args: argparse.Namespace, engine: str | None) -> list[str]:
    out = [
        f"policy.name_or_path={args.model}", f"policy.device={args.device}", f"policy.dtype={args.dtype}",
        "task.name=arithmetic", "task.options.n_train=512", "task.options.n_eval=64",
        f"train.steps={args.steps}", "train.batch_size=16", "train.micro_batch_size=64",
        "allocator.name=fixed", "allocator.options.k=4", "estimator.name=grpo",
        "generation.max_new_tokens=12", "generation.temperature=1.0", "loss.entropy_coef=0.01",
        "eval.every=0", "eval.size=32", "eval.at_start=false", "eval.greedy=false",
        "run.checkpoint_every=0", "run.tensorboard=false", "run.progress=false", "run.threads=4",
    ]  # fmt: skip
    return out + ([f"generation.engine={engine}"] if engine else [])


def lm_overrides(args: argparse.Namespace, lora: bool) -> list[str]:
    """Parts 8: part 3's run on the chat-form add/sub task of ``v05 demo --policy smollm2``, without its SFT."""
    lm = argparse.Namespace(**{**vars(args), "model": args.lm_model})
    out = [
        *train_overrides(lm, None), "task.template=chat",
        "task.options={max_digits: 2, mix: [0.5, 0.5, 0.0], n_train: 4000, n_eval: 64}",
        "train.batch_size=64", "generation.max_new_tokens=8",
    ]  # fmt: skip
    return out + (["policy.lora={r: 8, alpha: 16}"] if lora else [])


def part_train(args: argparse.Namespace, engine: str | None, lm: str | None = None) -> dict:
    import torch

    from v05.train.config import load_config
    from v05.train.loop import train

    if engine == "vllm":
        from v05.engines.hf import GenerationConfig

        if "engine" not in {f.name for f in dataclasses.fields(GenerationConfig)}:
            return {"status": "skipped", "reason": "GenerationConfig has no `engine` field yet (loop wiring pending)"}
        if importlib.util.find_spec("vllm") is None:
            return {"status": "skipped", "reason": "vllm is not installed in this environment"}
    overrides = train_overrides(args, engine) if lm is None else lm_overrides(args, lm == "lora")
    cfg = load_config(None, overrides)
    rows: list[dict] = []
    t0 = time.perf_counter()
    result = train(cfg, Path(args.work) / f"run-{lm or engine or 'hf'}", log=rows.append)
    seconds = time.perf_counter() - t0
    losses = [row.get("loss") for row in rows]
    grads = [row.get("grad_norm") for row in rows]
    finite = all(v is not None and math.isfinite(v) for v in losses + grads) and all(g > 0 for g in grads)
    ratios = [row.get("ratio_first_epoch") for row in rows]
    devs = [row.get("ratio_max_dev_first_epoch") for row in rows]  # max over tokens of |ρ − 1|
    clips = [row.get("clip_frac_first_epoch") for row in rows]
    ratio_ok = all(d is not None and d <= RATIO_TOLERANCE for d in devs) and all(c == 0 for c in clips)
    ok = finite and ratio_ok and result.steps == args.steps
    out = {
        "status": "ok" if ok else "failed",
        "steps": result.steps,
        "rollouts": result.rollouts_total,
        "seconds": round(seconds, 2),
        "loss": losses,
        "grad_norm": grads,
        "train_pass_rate": [row.get("train_pass_rate") for row in rows],
        "eval_pass_rate": result.eval_pass_rate,
        "step_seconds": [round(row.get("time/step", float("nan")), 3) for row in rows],
        "generate_seconds": [round(row.get("time/generate", float("nan")), 3) for row in rows],
        "update_seconds": [round(row.get("time/update", float("nan")), 3) for row in rows],
        "ratio_first_epoch": ratios,
        "ratio_max_dev_first_epoch": devs,
        "clip_frac_first_epoch": clips,
        "compute_total": rows[-1].get("compute_total") if rows else None,
    }
    if rows:  # the steady state: steps after the first (CUDA warm-up, allocator growth)
        steady = rows[1:] or rows
        per_step = sum(r.get("time/step", 0.0) for r in steady) / len(steady)
        out["rollouts_per_s_steady"] = round(result.rollouts_total / len(rows) / per_step, 1) if per_step else None
    if engine is None and lm is None and args.dtype != "float32":  # what the recompute removes
        base = load_config(None, [*train_overrides(args, engine), "train.recompute_old_logp=never"])
        raw: list[dict] = []
        train(base, Path(args.work) / "run-hf-no-recompute", log=raw.append)
        out["without_recompute"] = {key: [r.get(key) for r in raw] for key in
                                    ("ratio_first_epoch", "ratio_max_dev_first_epoch", "clip_frac_first_epoch")}
    if torch.cuda.is_available():
        out["max_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if not finite:
        out["reason"] = "a loss or gradient norm is missing, not finite, or the gradient is 0"
    elif not ratio_ok:
        out["reason"] = f"first-epoch max |ratio − 1| > {RATIO_TOLERANCE} or tokens clipped: {devs}, clip {clips}"
    return out


def part_vllm_engine(args: argparse.Namespace) -> dict:
    if importlib.util.find_spec("vllm") is None:
        return {"status": "skipped", "reason": "vllm is not installed in this environment"}
    import numpy as np
    import torch

    from v05.engines.hf import GenerationConfig, HFEngine
    from v05.engines.vllm import VLLMEngine, recompute_old_logp
    from v05.train.policy import PolicyConfig, load_policy

    model, tok = load_policy(PolicyConfig(name_or_path=args.model, device=args.device, dtype=args.dtype))
    gen = GenerationConfig(temperature=1.0, max_new_tokens=16)
    rng = np.random.default_rng(0)
    prompts = [f"{a}+{b}=" for a, b in rng.integers(0, 1000, size=(64, 2))]
    counts = [4] * len(prompts)
    t0 = time.perf_counter()
    engine = VLLMEngine(model, tok, gen, seed=0, recompute_logprobs=False, gpu_memory_utilization=0.3)
    out: dict = {"vllm": importlib.metadata.version("vllm"), "init_seconds": round(time.perf_counter() - t0, 2)}
    try:
        engine.generate(prompts[:4], [1] * 4)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = engine.generate(prompts, counts)
        torch.cuda.synchronize()
        out["generate_seconds"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        HFEngine(model, tok, gen, seed=0).generate(prompts, counts)
        torch.cuda.synchronize()
        out["hf_generate_seconds"] = round(time.perf_counter() - t0, 3)
        m = r.response_mask.bool()
        ends = r.response_ids[torch.arange(len(r)), torch.as_tensor(r.lengths) - 1]
        out["layout_ok"] = bool(
            (r.prompt_index == np.repeat(np.arange(len(prompts)), counts)).all()
            and ((ends == tok.eos_token_id).numpy() == ~r.truncated).all()
        )
        diff = r.old_logp[m] - recompute_old_logp(model, r, 1.0).old_logp[m]  # vLLM − policy, per token
        out |= {"rollouts": len(r), "tokens": int(m.sum()), "truncated_frac": float(r.truncated.mean()),
                "logp_gap_mean_abs": float(diff.abs().mean()), "logp_gap_max_abs": float(diff.abs().max()),
                "logp_gap_mean": float(diff.mean())}  # fmt: skip
        old_model = copy.deepcopy(model)
        with torch.no_grad(), torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda" else []):
            torch.manual_seed(0)
            for p in model.parameters():  # a large step: ~1 std of noise per parameter
                p.add_(torch.randn_like(p) * p.float().std().clamp_min(0.02).to(p.dtype))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.sync_weights(model)
        torch.cuda.synchronize()
        out["sync_seconds"] = round(time.perf_counter() - t0, 3)
        r2 = engine.generate(prompts, counts)
        m2 = r2.response_mask.bool()
        gap_new = float((r2.old_logp[m2] - recompute_old_logp(model, r2, 1.0).old_logp[m2]).abs().mean())
        gap_old = float((r2.old_logp[m2] - recompute_old_logp(old_model, r2, 1.0).old_logp[m2]).abs().mean())
        out |= {"after_sync_gap_new_policy": gap_new, "after_sync_gap_old_policy": gap_old}
        ok = out["layout_ok"] and out["logp_gap_mean_abs"] < 0.05 and gap_new < 0.05 and gap_new < gap_old
        out["status"] = "ok" if ok else "failed"
        if not ok:
            out["reason"] = "layout, log-prob agreement (mean |Δ| < 0.05) or weight sync check failed"
    finally:
        engine.close()
    return out


def part_priors(args: argparse.Namespace) -> dict:
    """The priors' encoder backends on the device against the CPU fp32 reference (formerly gpu_check.py)."""
    import numpy as np
    import torch
    import transformers

    from v05.datasets import load_v0
    from v05.priors.encoders import HFEncoderBackend
    from v05.priors.v0_checkpoint import AdapterConfig, build_adapter, save_adapter
    from v05.priors.v0_official import V0AdapterBackend

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[chr(c) for c in range(33, 127)]]
    enc = Path(args.work) / "qwen3-encoder"
    enc.mkdir(parents=True, exist_ok=True)
    (enc / "vocab.txt").write_text("\n".join(vocab))
    transformers.BertTokenizerFast(vocab_file=str(enc / "vocab.txt"), do_lower_case=False).save_pretrained(enc)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = transformers.Qwen3Config(vocab_size=len(vocab), pad_token_id=0, max_position_embeddings=4096,
                                          hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16)  # fmt: skip
        transformers.Qwen3Model(config).save_pretrained(enc, safe_serialization=True)

    def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
        cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
        return {"max_abs_diff": float(np.max(np.abs(a - b))), "min_cosine": float(np.min(cos))}

    ds = load_v0()
    texts = ds.texts(ds.context.prompt_id[:64])
    device = args.device
    out: dict = {}
    ref = HFEncoderBackend(path=str(enc), batch_size=32).encode(texts)
    for dtype in ("float32", "bfloat16"):
        got = HFEncoderBackend(path=str(enc), device=device, dtype=dtype, batch_size=32).encode(texts)
        out[f"hf_encoder_{dtype}_vs_cpu"] = compare(ref, got)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        adapter = build_adapter(AdapterConfig(hidden_size=64, num_queries=8, embed_dim=6, num_heads=3, bottleneck=16))
        torch.nn.init.normal_(adapter.generator[4].weight, std=0.1)
    ad_path = save_adapter(adapter, Path(args.work) / "adapter.safetensors")
    cpu = V0AdapterBackend(adapter=str(ad_path), encoder=str(enc), batch_size=16).encode(texts)
    dev = V0AdapterBackend(adapter=str(ad_path), encoder=str(enc), batch_size=16, device=device).encode(texts)
    out["v0_adapter_vs_cpu"] = compare(cpu, dev) | {"n_features": int(dev.shape[1])}
    ok = (out["hf_encoder_float32_vs_cpu"]["min_cosine"] > 0.999 and out["hf_encoder_bfloat16_vs_cpu"]["min_cosine"]
          > 0.99 and out["v0_adapter_vs_cpu"]["min_cosine"] > 0.999)  # fmt: skip
    return {"status": "ok" if ok else "failed", **out, **({} if ok else {"reason": "device and CPU disagree"})}


def part_verl(args: argparse.Namespace) -> dict:
    if importlib.util.find_spec("verl") is None:
        return {"status": "skipped", "reason": "verl is not installed in this environment"}
    test = REPO / "tests" / "adapters" / "test_verl.py"
    if not test.is_file():
        return {"status": "skipped", "reason": "tests/adapters/test_verl.py does not exist yet"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=REPO,
                          capture_output=True, text=True, timeout=PART_LIMITS_S["verl"] - 10)  # fmt: skip
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    status = "ok" if proc.returncode == 0 else "failed"
    if proc.returncode == 5 or (proc.returncode == 0 and tail and " passed" not in tail[-1]):  # every test skipped
        return {"status": "skipped", "reason": f"pytest ran no test: {tail[-2:] if tail else ''}",
                "verl": importlib.metadata.version("verl")}  # fmt: skip
    return {"status": status, "returncode": proc.returncode, "tail": tail,
            "verl": importlib.metadata.version("verl")}  # fmt: skip


def run_part(args: argparse.Namespace) -> None:
    """Child mode: run one part and write its result (or the exception) to ``--result``."""
    t0 = time.perf_counter()
    try:
        if args.part in ("hf_train", "vllm_train"):
            result = part_train(args, "vllm" if args.part == "vllm_train" else None)
        elif args.part == "vllm_engine":
            result = part_vllm_engine(args)
        elif args.part == "priors":
            result = part_priors(args)
        elif args.part in ("lm_lora", "lm_full"):
            result = part_train(args, None, lm=args.part.removeprefix("lm_"))
        else:
            result = part_verl(args)
    except Exception as err:  # noqa: BLE001 (the orchestrator records any failure and carries on)
        result = {"status": "failed", "reason": f"{type(err).__name__}: {err}"[:2000],
                  "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
    result["seconds_total"] = round(time.perf_counter() - t0, 2)
    Path(args.result).write_text(json.dumps(result, indent=2, default=str))


# -- the orchestrator ---------------------------------------------------------------------------------------------
def spawn(args: argparse.Namespace, part: str, limit: float, log: list[str]) -> dict:
    """Run ``--part PART`` in a fresh interpreter (its own process group, killed at ``limit`` seconds)."""
    result_path = Path(args.work) / f"{part}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--result", str(result_path),
           "--model", args.model, "--work", args.work, "--steps", str(args.steps), "--device", args.device,
           "--dtype", args.dtype, "--lm-model", args.lm_model or ""]  # fmt: skip
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
                        "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        timed_out = True
    log.append(f"===== {part} (rc={proc.returncode}) =====\n{output}")
    if timed_out:
        return {"status": "timeout", "reason": f"killed after {limit:.0f} s", "tail": output.splitlines()[-15:]}
    if not result_path.is_file():
        return {"status": "failed", "reason": f"exited {proc.returncode} without a result",
                "tail": output.splitlines()[-15:]}  # fmt: skip
    return json.loads(result_path.read_text())


def summary_line(name: str, r: dict) -> str:
    keys = ("reason", "params_m", "gpu", "rollouts_per_s_steady", "ratio_max_dev_first_epoch", "logp_gap_mean_abs",
            "after_sync_gap_new_policy", "returncode")
    detail = "; ".join(f"{k}={r[k]}" for k in keys if k in r and r[k] is not None)
    return f"{name:<12} {r.get('status', '?'):<8} {r.get('seconds_total', 0.0):7.1f}s  {detail}"[:300]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(DEFAULT_OUT),
                    help="folder for gpu_check.json/.log ($OUT, else benchmarks/results/gpu)")
    ap.add_argument("--steps", type=int, default=5, help="v05 train steps per engine")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all parts together")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model, CPU, bf16: check this script itself")
    ap.add_argument("--only", nargs="*", default=None, help="run only these subprocess parts")
    ap.add_argument("--lm-tokenizer", default=str(REPO / ".gpucarry" / "smollm2-tok"),
                    help="folder with SmolLM2-135M-Instruct's tokenizer files for parts lm_lora/lm_full (default "
                    ".gpucarry/smollm2-tok; copy them from the v05 model cache, see benchmarks/gpu/README.md)")
    # child mode (internal)
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="bfloat16", help=argparse.SUPPRESS)
    ap.add_argument("--lm-model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        run_part(args)
        return 0

    started = time.perf_counter()
    if args.cpu_smoke:  # bf16 on the CPU too, so the first-epoch ratio check runs here
        args.device, args.dtype, args.steps = "cpu", "bfloat16", min(args.steps, 2)
    args.work = tempfile.mkdtemp(prefix="v05-gpu-check-")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts: dict[str, dict] = {}
    log: list[str] = []

    for name, fn in (("env", part_env), ("model", None), ("lm_model", None)):
        t0 = time.perf_counter()
        try:
            if fn is not None:
                parts[name] = fn()
            elif name == "model":
                path = Path(args.work) / "qwen2-char"
                parts[name] = part_model(path, "cpu-smoke" if args.cpu_smoke else "gpu", args.dtype)
                args.model = str(path)
            elif not Path(args.lm_tokenizer).is_dir():
                parts[name] = {"status": "skipped", "reason": f"no tokenizer folder {args.lm_tokenizer}"}
            else:
                path = Path(args.work) / "smollm2-shape"
                parts[name] = part_lm_model(path, Path(args.lm_tokenizer), args.dtype, tiny=args.cpu_smoke)
                args.lm_model = str(path)
        except Exception as err:  # noqa: BLE001
            parts[name] = {"status": "failed", "reason": f"{type(err).__name__}: {err}",
                           "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
        parts[name]["seconds_total"] = round(time.perf_counter() - t0, 2)
        print(summary_line(name, parts[name]), flush=True)
    if not args.cpu_smoke and not parts["env"].get("cuda_available"):
        print("no CUDA device: the GPU parts are skipped (use --cpu-smoke to dry-run this script)", flush=True)

    for name in PARTS:
        left = args.budget - (time.perf_counter() - started)
        if args.only is not None and name not in args.only:
            parts[name] = {"status": "skipped", "reason": "not in --only"}
        elif name.startswith("lm_") and not args.lm_model:
            parts[name] = {"status": "skipped", "reason": "no SmolLM2-shaped model (see lm_model)"}
        elif args.model is None:
            parts[name] = {"status": "skipped", "reason": "no model (the model part failed)"}
        elif not args.cpu_smoke and not parts["env"].get("cuda_available"):
            parts[name] = {"status": "skipped", "reason": "no CUDA device"}
        elif left < 20:
            parts[name] = {"status": "skipped", "reason": f"budget spent ({args.budget:.0f} s)"}
        else:
            t0 = time.perf_counter()
            parts[name] = spawn(args, name, min(PART_LIMITS_S[name], left), log)
            parts[name].setdefault("seconds_total", round(time.perf_counter() - t0, 2))
        print(summary_line(name, parts[name]), flush=True)

    summary = {"total_seconds": round(time.perf_counter() - started, 1), "cpu_smoke": args.cpu_smoke,
               "device": args.device, "dtype": args.dtype, "steps": args.steps, "parts": parts}  # fmt: skip
    (out_dir / "gpu_check.json").write_text(json.dumps(summary, indent=2, default=str))
    (out_dir / "gpu_check.log").write_text("\n".join(log)[-4_000_000:])
    print(f"wrote {out_dir / 'gpu_check.json'} ({summary['total_seconds']} s)", flush=True)
    return 0 if all(p.get("status") in ("ok", "skipped") for p in parts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
