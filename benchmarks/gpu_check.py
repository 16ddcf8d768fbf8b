"""GPU checks of v05's torch paths (run on a CUDA machine): the HF encoder backend in bf16 and the V0 adapter stack.

Usage: PYTHONPATH=src python benchmarks/gpu_check.py --json gpu_check.json [--big]

1. A tiny random Qwen3 encoder (saved as safetensors with a local tokenizer): embeddings on CUDA (fp32, bf16) agree
   with the CPU fp32 reference (max |Δ| and min cosine reported).
2. The V0 adapter stack (``V0AdapterBackend``: encoder hidden states → dynamic-query adapter) on CUDA agrees with CPU.
3. ``--big``: a randomly initialised encoder of Qwen3-Embedding-0.6B's shape (hidden 1024, 28 layers) in bf16 on CUDA:
   prompts/s for 512 prompts of the bundled data (weights are random: speed only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from v05.datasets import load_v0
from v05.priors.embeddings import HFEncoderBackend
from v05.priors.v0_checkpoint import AdapterConfig, V0AdapterBackend, build_adapter, save_adapter

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[chr(c) for c in range(33, 127)]]


def save_encoder(path: Path, **shape: int) -> Path:
    """A random Qwen3 encoder + character-level WordPiece tokenizer saved locally (no hub)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(VOCAB))
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=False).save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=len(VOCAB), pad_token_id=0, max_position_embeddings=4096, **shape)
    model = transformers.Qwen3Model(config)
    if shape.get("hidden_size", 0) >= 1024:
        model = model.to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    return path


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Max abs difference and min row cosine between two (Q, D) arrays."""
    cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
    return {"max_abs_diff": float(np.max(np.abs(a - b))), "min_cosine": float(np.min(cos))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default="gpu_check.json")
    ap.add_argument("--big", action="store_true", help="also time a Qwen3-Embedding-0.6B-shaped random encoder")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script checks the GPU paths")
    out: dict[str, object] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0),
    }
    ds = load_v0()
    texts = ds.texts(ds.context.prompt_id[:512])
    tmp = Path(tempfile.mkdtemp())
    enc = save_encoder(
        tmp / "tiny",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    ref = HFEncoderBackend(path=str(enc), batch_size=32).encode(texts[:64])
    for dtype in ("float32", "bfloat16"):
        got = HFEncoderBackend(path=str(enc), device="cuda", dtype=dtype, batch_size=32).encode(texts[:64])
        out[f"hf_encoder_cuda_{dtype}_vs_cpu"] = compare(ref, got)

    torch.manual_seed(1)
    adapter = build_adapter(AdapterConfig(hidden_size=64, num_queries=8, embed_dim=6, num_heads=3, bottleneck=16))
    torch.nn.init.normal_(adapter.generator[4].weight, std=0.1)
    ad_path = save_adapter(adapter, tmp / "adapter.safetensors")
    cpu = V0AdapterBackend(adapter=str(ad_path), encoder=str(enc), batch_size=16).encode(texts[:64])
    gpu = V0AdapterBackend(adapter=str(ad_path), encoder=str(enc), batch_size=16, device="cuda").encode(texts[:64])
    out["v0_adapter_cuda_vs_cpu"] = compare(cpu, gpu) | {"n_features": int(gpu.shape[1])}

    if args.big:
        t = time.perf_counter()
        big = save_encoder(
            tmp / "qwen3-embedding-0.6b-shape",
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
        )
        out["big_build_seconds"] = time.perf_counter() - t
        backend = HFEncoderBackend(path=str(big), device="cuda", dtype="bfloat16", batch_size=64, max_length=2048)
        backend.encode(texts[:64])  # load + warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        emb = backend.encode(texts)
        torch.cuda.synchronize()
        sec = time.perf_counter() - t
        out["big_encoder_bf16"] = {
            "prompts": len(texts),
            "seconds": sec,
            "prompts_per_s": len(texts) / sec,
            "dim": int(emb.shape[1]),
            "finite": bool(np.all(np.isfinite(emb))),
            "truncated": backend.truncated,
        }
    Path(args.json).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
