"""SmolLM2-135M-Instruct with a LoRA adapter: one forward + backward + AdamW step in float32 against a bf16 base.

    python benchmarks/bench_lora_dtype.py [--rounds 3] [--batch 16] [--tokens 45] [--rank 8]

One torch thread; prints each round's seconds per dtype (the first round includes warm-up) and the adapter's dtype.
The figure behind ``policy.dtype=auto``'s CPU rule (docs/training.md): run it on a quiet machine to quote it.
"""

from __future__ import annotations

import argparse
import time

import torch

from v05.train.policy import LoraConfig, PolicyConfig, load_policy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=45)
    ap.add_argument("--rank", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ids = torch.randint(0, 1000, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
    for dtype in ("float32", "bfloat16"):
        lora = LoraConfig(r=args.rank, alpha=2.0 * args.rank)
        model, _ = load_policy(PolicyConfig(name_or_path="smollm2-135m-instruct", device="cpu", dtype=dtype, lora=lora))
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        seconds = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            model(input_ids=ids).logits[:, -8:].float().logsumexp(-1).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            seconds.append(round(time.perf_counter() - t0, 2))
        print(f"base {dtype}: {seconds} s per step; adapter {sorted({str(p.dtype) for p in trainable})}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
