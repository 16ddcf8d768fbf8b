r"""Add each prompt's bare problem text to verl's DAPO-Math-17k parquet, as ``extra_info["question"]``.

The v05 prior of ``run_qwen3_4b_dapo.sh`` (V0-style, in-context) reads ``extra_info[text_field]``: V0 was trained on
problem texts, while verl's DAPO-Math-17k parquet keeps only the user turn that wraps each problem in DAPO's template

    Solve the following math problem step by step. The last line of your response should be of the form Answer:
    $Answer (without quotes) where $Answer is the answer to the problem.\n\n<problem>\n\nRemember to put your answer
    on its own line after "Answer:".

(verl's gsm8k and geo3k scripts write ``extra_info["question"]`` themselves). Usage, in the verl environment:

    python examples/verl/add_problem_text.py ~/data/dapo-math-17k.parquet ~/data/dapo-math-17k-v05.parquet
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pandas as pd

HEAD = "Solve the following math problem step by step."
REMINDER = "Remember to put your answer on its own line after"


def problem_text(messages: Sequence[dict]) -> str:
    """The problem inside the last user turn of a DAPO-Math-17k prompt.

    Raises:
        ValueError: no user turn, or it is not wrapped in DAPO's template (another dataset: write its field instead).
    """
    user = [m for m in messages if m.get("role") == "user"]
    text = str(user[-1].get("content", "")) if user else ""
    if not text.startswith(HEAD) or "\n\n" not in text or REMINDER not in text:
        raise ValueError(f"prompt is not in DAPO-Math-17k's template: {text[:80]!r}")
    body = text.split("\n\n", 1)[1]
    return body.rsplit(REMINDER, 1)[0].strip()


def add_problem_text(frame: pd.DataFrame, *, prompt_key: str = "prompt", field: str = "question") -> pd.DataFrame:
    """A copy of ``frame`` whose ``extra_info`` dicts also hold ``field`` = :func:`problem_text` of the prompt."""
    out = frame.copy()
    out["extra_info"] = [
        {**dict(info or {}), field: problem_text(list(messages))}
        for info, messages in zip(frame["extra_info"], frame[prompt_key], strict=True)
    ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Read ``src`` (parquet), add the problem texts, write ``dst``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="verl-format DAPO-Math-17k parquet")
    parser.add_argument("dst", help="output parquet")
    parser.add_argument("--prompt-key", default="prompt", help="column of chat messages (data.prompt_key)")
    parser.add_argument("--field", default="question", help="extra_info field to write (+algorithm.v05.text_field)")
    args = parser.parse_args(argv)
    frame = add_problem_text(pd.read_parquet(args.src), prompt_key=args.prompt_key, field=args.field)
    frame.to_parquet(args.dst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
