r"""A sampler of TRL's train dataset whose generation batches are drawn from candidate pools (SPO's, or a prior's).

Used by :class:`v05.adapters.trl.V05GRPOTrainer` with ``v05_sampler="spo"`` or ``"prior_select"``; it does not
import TRL. Epoch e of
n rows, B prompts per generation batch, a candidate pool of P = ``pool_factor``·B:

    perm  = permutation(n) seeded by [seed, e]
    pool_t = perm[t·P : (t + 1)·P],   t = 0 … ⌊n / P⌋ − 1   (P > n: one pool, the whole dataset)
    batch_t = draw(pool_t, e, t)      B dataset rows: the trainer's round (predict → allocate) on the main process

and each drawn row is yielded K = ``num_generations`` times in a row and the block R = ``num_iterations ×
steps_per_generation`` times: TRL's ``RepeatSampler`` layout, so the rest of TRL is unchanged. The rows a pool's draw
passed over are used up for the epoch (v05's trainer: ``allocator.rejects=drop``).

The draw is lazy: ``draw`` runs when the data loader asks for the batch's first row, so it reads the tracker as it
is then. accelerate's data loader reads one batch ahead of the one it hands the trainer (``DataLoaderShard``, to
detect the last batch; not switchable). Where a generation batch is read within one optimizer step
(R ≤ ``gradient_accumulation_steps``; TRL's defaults, R = 1), an epoch's batch t other than its first is therefore
drawn before batch t − 1 is scored: its draw sees the tracker after batches ≤ t − 2 (a deviation from the recipe,
whose draw sees every step before it). An epoch's first batch, and every batch when the reads of a generation batch
span optimizer steps (``num_iterations`` ≥ 2), see all the scored batches. Every process iterates its own copy of
the sampler; ``draw`` runs the allocator on the main process and broadcasts the rows, so the processes yield the
same indices (the draws happen at the same point of each process's identical loop). On resume the skipped batches
are drawn again from the restored tracker, so a resumed run's prompts differ from an uninterrupted run's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from torch.utils.data import Sampler

from v05._types import IntArray

DrawFn = Callable[[IntArray, int, int], IntArray]
"""draw(pool (P,) dataset rows, epoch, batch index in the epoch) -> (B,) dataset rows to generate for."""


class PoolSampler(Sampler[int]):
    """Generation batches of ``batch_size`` rows, each drawn by ``draw`` from its candidate pool (module docstring).

    Args:
        n_rows: n, the train dataset's rows.
        batch_size: B, prompts per generation batch (TRL's ``generation_batch_size // num_generations``).
        pool_size: P, candidates per generation batch (at most n are used).
        mini_repeat_count: K, rollouts per prompt (each row yielded K times in a row).
        repeat_count: R, how many times TRL reads a generation batch (``num_iterations × steps_per_generation``).
        seed: the permutations' seed (TRL's ``args.seed``).
        draw: the allocator's draw (:data:`DrawFn`).

    Raises:
        ValueError: fewer rows than one generation batch, or a pool smaller than the batch.
    """

    def __init__(
        self, n_rows: int, *, batch_size: int, pool_size: int, mini_repeat_count: int, repeat_count: int, seed: int,
        draw: DrawFn,
    ) -> None:  # fmt: skip
        if n_rows < batch_size or pool_size < batch_size:
            raise ValueError(
                f"the sampler draws {batch_size} prompts a generation batch from pools of {pool_size} candidates, "
                f"but the train dataset has {n_rows} rows: give it at least {batch_size} rows"
            )
        self.n_rows, self.batch_size, self.pool_size = n_rows, batch_size, min(pool_size, n_rows)
        self.mini_repeat_count, self.repeat_count, self.seed, self.draw = mini_repeat_count, repeat_count, seed, draw
        self.epoch = 0

    @property
    def n_batches(self) -> int:
        """Generation batches an epoch: ⌊n / P⌋."""
        return self.n_rows // self.pool_size

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose permutation the next iteration walks (accelerate calls it before each pass)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        self.epoch += 1
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_rows)  # (n,)
        for t in range(self.n_batches):
            rows = np.asarray(self.draw(perm[t * self.pool_size : (t + 1) * self.pool_size], epoch, t))  # (B,)
            if rows.shape != (self.batch_size,):
                raise ValueError(f"the draw returned {rows.shape[0]} rows for a generation batch of {self.batch_size}")
            for _ in range(self.repeat_count):
                for row in rows.tolist():
                    yield from [row] * self.mini_repeat_count

    def __len__(self) -> int:
        return self.n_batches * self.batch_size * self.mini_repeat_count * self.repeat_count


__all__ = ["DrawFn", "PoolSampler"]
