"""SmolLM2-135M-Instruct's pass rate as it comes, on candidate tasks in chat form: where could RL have signal?

    python benchmarks/lm_start.py --json benchmarks/results/lm/start.json [--n 128] [--tasks NAME,...]

For each candidate task setting (:data:`CANDIDATES`), the eval split's first ``--n`` prompts are rendered through
the model's chat template and answered once sampled (T = 1, the trainer's evaluation seed) and once greedy, at the
setting's token budget; the pass rate is the task's own verifier's. A setting where the sampled pass rate lies in
5–40 % gives GRPO-style training a signal without a warm start (issue 28, part 3). Pass rates, not speeds: a busy
machine changes only the wall time, which is reported beside each row.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from v05.tasks import make_task
from v05.train.config import load_config
from v05.train.evaluation import evaluate
from v05.train.policy import load_policy, set_cpu_threads
from v05.train.warmstart import render_all

BASE = ["policy.name_or_path=smollm2-135m-instruct", "warmup.enabled=false", "task.template=chat", "eval.greedy=true"]
CANDIDATES: dict[str, list[str]] = {
    "arith-add-1digit": ["task.name=arithmetic", "task.options={max_digits: 1, mix: [1.0, 0.0, 0.0], "
                         "n_train: 40, n_eval: 40, n_val: 20}",
                         "generation.max_new_tokens=16"],
    "arith-addsub-1digit": ["task.name=arithmetic", "task.options={max_digits: 1, mix: [0.5, 0.5, 0.0], "
                            "n_train: 50, n_eval: 64, n_val: 30}",
                            "generation.max_new_tokens=16"],
    "arith-addsub-2digit": ["task.name=arithmetic", "task.options={max_digits: 2, mix: [0.5, 0.5, 0.0]}",
                            "generation.max_new_tokens=16"],
    "arith-hard": ["task.name=arithmetic", "generation.max_new_tokens=16"],
    "gym-basic-arithmetic": ["task.name=reasoning_gym",
                             "task.options={dataset: basic_arithmetic, size_train: 500, size_eval: 200, "
                             "config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}",
                             "generation.max_new_tokens=32"],
    "gym-spell-backward": ["task.name=reasoning_gym",
                           "task.options={dataset: spell_backward, size_train: 500, size_eval: 200, "
                           "config: {min_word_len: 3, max_word_len: 5}}",
                           "generation.max_new_tokens=32"],
    "gym-leg-counting": ["task.name=reasoning_gym",
                         "task.options={dataset: leg_counting, size_train: 500, size_eval: 200, "
                         "config: {min_animals: 1, max_animals: 2, min_instances: 1, max_instances: 3}}",
                         "generation.max_new_tokens=32"],
}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="write the pass rates here")
    ap.add_argument("--n", type=int, default=128, help="eval prompts per task (default 128)")
    ap.add_argument("--tasks", default=",".join(CANDIDATES), help="comma-separated candidates")
    args = ap.parse_args()
    names = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        ap.error(f"unknown task(s) {', '.join(unknown)}; valid: {', '.join(CANDIDATES)}")
    rows, model, tokenizer = {}, None, None
    for name in names:
        cfg = load_config("demo-grpo4", [*BASE, *CANDIDATES[name]])
        if model is None:
            set_cpu_threads(cfg.run.threads)
            model, tokenizer = load_policy(cfg.policy)
            model.eval()
        task = make_task(cfg.task.name, **cfg.task.options)
        held_out = list(task.eval_prompts())[: args.n]
        texts = render_all(cfg, task, held_out, tokenizer)
        t0 = time.perf_counter()
        rates = evaluate(cfg, model, tokenizer, task, held_out, texts)
        rows[name] = {"overrides": CANDIDATES[name], "n": len(held_out),
                      "max_new_tokens": cfg.generation.max_new_tokens, "sampled": rates["eval_pass_rate"],
                      "greedy": rates["eval_greedy_pass_rate"],
                      "wall_s": time.perf_counter() - t0, "example_prompt": texts[0]}  # fmt: skip
        print(f"{name}: sampled {rates['eval_pass_rate']:.3f}, greedy {rates['eval_greedy_pass_rate']:.3f} "
              f"({len(held_out)} prompts, {rows[name]['wall_s']:.0f} s)", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"model": "smollm2-135m-instruct (as it comes)", "tasks": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
