r"""A multi-domain pool: several built tasks behind one policy, one training pool and one eval split.

The pool regime ``mixed`` of ``v05 bench matrix`` (issue 26): a per-prompt prior can only beat one policy-level
baseline where the prompts' pass rates μ spread wide. For ±1 rewards and a baseline V,

    E[(r − V)²] = E[1 − μ²] + E[(μ − V)²],

so the most any prior removes is Var(μ) (what a running mean leaves, E[(μ − V)²] ≥ Var μ); a pool mixing
near-certain and near-impossible prompts (easy and hard arithmetic with another domain) makes Var(μ) large.

Each component keeps its own splits, verifier and gold answers; a prompt's key is its component's key prefixed with
``mix{i}.`` (two components may hold the same question, e.g. ``"3+4"``), and its ``meta`` gains ``component: i``.
Splits are the components' splits concatenated in order (so a component's share of the pool, of the eval split
and of the validation split is set by its own sizes), less any training prompt whose question another component
holds out (components may overlap: 1-2 digit sums are also 1-3 digit sums). Components must share one plain
template (the char-level policy reads ``"{question}="`` for every task that has a compact form). Numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from v05.tasks.base import Prompt, Scores, Task, check_unique_keys, sft_examples

KEY_PREFIX = "mix"


@dataclass(frozen=True, slots=True)
class Mixture:
    """Built component tasks as one task (see the module docstring).

    :class:`v05.tasks.registry.MixtureTask` builds it from a config.

    Raises:
        ValueError: fewer than two components, or components with different plain templates.
    """

    parts: tuple[Task, ...]
    _train: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _eval: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _val: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _origin: dict[str, tuple[int, Prompt]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.parts) < 2:
            raise ValueError(f"a mixture needs at least 2 component tasks, got {len(self.parts)}")
        templates = {t.plain_template for t in self.parts}
        if len(templates) != 1:
            raise ValueError(f"mixture components must share one plain template, got {sorted(templates)}")
        origin: dict[str, tuple[int, Prompt]] = {}

        def rekey(i: int, prompts: Sequence[Prompt]) -> list[Prompt]:
            out = []
            for p in prompts:
                q = replace(p, key=f"{KEY_PREFIX}{i}.{p.key}", meta={**p.meta, "component": i})
                origin[q.key] = (i, p)
                out.append(q)
            return out

        # a question held out by any component is no training prompt of another (two components may overlap)
        held = {p.question for t in self.parts for p in (*t.eval_prompts(), *t.validation_prompts())}
        splits = {"train": [], "eval": [], "val": []}  # type: dict[str, list[Prompt]]
        for i, task in enumerate(self.parts):
            splits["train"] += rekey(i, [p for p in task.train_prompts() if p.question not in held])
            splits["eval"] += rekey(i, task.eval_prompts())
            splits["val"] += rekey(i, task.validation_prompts())
        check_unique_keys([*splits["train"], *splits["eval"], *splits["val"]], "Mixture")
        object.__setattr__(self, "_train", tuple(splits["train"]))
        object.__setattr__(self, "_eval", tuple(splits["eval"]))
        object.__setattr__(self, "_val", tuple(splits["val"]))
        object.__setattr__(self, "_origin", origin)

    @property
    def name(self) -> str:
        """``"mixture(" + the components' names + ")"``."""
        return "mixture(" + ",".join(t.name for t in self.parts) + ")"

    @property
    def plain_template(self) -> str:
        """The components' shared plain template."""
        return self.parts[0].plain_template

    @property
    def chat_instruction(self) -> str | None:
        """The components' chat instruction if they share one, else None (each question stands alone)."""
        found = {getattr(t, "chat_instruction", None) for t in self.parts}
        return found.pop() if len(found) == 1 else None

    def train_prompts(self) -> Sequence[Prompt]:
        """Every component's training pool, in component order."""
        return self._train

    def eval_prompts(self) -> Sequence[Prompt]:
        """Every component's eval split, in component order."""
        return self._eval

    def validation_prompts(self) -> Sequence[Prompt]:
        """Every component's validation split, in component order."""
        return self._val

    def component(self, prompt: Prompt) -> tuple[int, Prompt]:
        """(component index, the component's own prompt) of a mixture prompt.

        Raises:
            ValueError: the prompt is not from this mixture.
        """
        found = self._origin.get(prompt.key)
        if found is None:
            raise ValueError(f"prompt {prompt.key!r} is not from this mixture; score it with the task that made it")
        return found

    def sft_target(self, prompt: Prompt) -> str:
        """The component's SFT target for the prompt."""
        i, own = self.component(prompt)
        return self.parts[i].sft_target(own)

    def sft_examples(self, n: int, seed: int) -> list[Prompt]:
        """``n`` warm-up prompts, shuffled by ``seed``.

        Each component gives its share (its pool's share) from its own ``sft_examples`` (fresh generator draws for
        arithmetic) or its pool cycled, rekeyed.

        Raises:
            ValueError: ``n`` is negative.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        sizes = np.array([len(t.train_prompts()) for t in self.parts], np.float64)
        share = np.floor(n * sizes / sizes.sum()).astype(int)
        share[: n - int(share.sum())] += 1  # the remainder, one each to the first components
        out: list[Prompt] = []
        for i, (task, m) in enumerate(zip(self.parts, share.tolist(), strict=True)):
            own = sft_examples(task, m, seed + i)
            out += [replace(p, key=f"{KEY_PREFIX}{i}.{p.key}", meta={**p.meta, "component": i}) for p in own]
        for p in out:  # a component's fresh SFT draw is not in the pool: score and target it through the mixture
            self._origin.setdefault(p.key, (int(p.meta["component"]), _unprefixed(p)))  # type: ignore[call-overload]
        order = np.random.default_rng(seed).permutation(len(out))
        return [out[j] for j in order]

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> Scores:
        """Each component's verifier on its own prompts, reassembled in the batch's order.

        Raises:
            ValueError: a prompt is not from this mixture, or the lengths differ.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"length mismatch (prompts: {len(prompts)}, completions: {len(completions)})")
        n = len(prompts)
        rewards, no_answer = np.zeros(n), np.zeros(n, bool)
        errors, timeouts = np.zeros(n, bool), np.zeros(n, bool)
        extracted: list[str | None] = [None] * n
        where: dict[int, list[int]] = {}
        own: dict[int, list[Prompt]] = {}
        for j, p in enumerate(prompts):
            i, original = self.component(p)
            where.setdefault(i, []).append(j)
            own.setdefault(i, []).append(original)
        for i, rows in where.items():
            sc = self.parts[i].score(own[i], [completions[j] for j in rows])
            rows_arr = np.asarray(rows)
            rewards[rows_arr], no_answer[rows_arr] = sc.rewards, sc.no_answer
            errors[rows_arr], timeouts[rows_arr] = sc.errors, sc.timeouts
            for j, text in zip(rows, sc.extracted, strict=True):
                extracted[j] = text
        return Scores(rewards, no_answer, errors, timeouts, tuple(extracted))


def _unprefixed(p: Prompt) -> Prompt:
    return replace(p, key=p.key.split(".", 1)[1], meta={k: v for k, v in p.meta.items() if k != "component"})


__all__ = ["KEY_PREFIX", "Mixture"]
