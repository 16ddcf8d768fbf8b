"""Honest budgets in the loop: every metrics row carries cumulative ``tokens_total``, ``compute_total`` and
``compute_user``, and each method's token-passes follow from its passes by hand (a forward of one token by one model
counts 1, a backward 2): this trainer's (shared prompt prefix in the update, every rollout's prompt prefilled) and a
TRL/verl user's (every rollout's prompt through the update, each group's prompt prefilled once: vLLM's prefix cache).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.train._rows import rows_of
from v05.engines.hf import GenerationConfig, HFEngine
from v05.train.checkpoint import COMPUTE_TOTALS
from v05.train.compute import PARTS, UPDATE_PARTS, ComputeMeter, user_step_recount
from v05.train.config import load_config
from v05.train.loop import train
from v05.train.policy import PolicyConfig, load_policy
from v05.train.schedule import LRSchedule
from v05.train.step import update_policy

POISE = ["estimator.name=poise", "allocator.options={k: 2}", "poise.bootstrap_steps=1", "poise.pca_prompt=8",
         "poise.pca_response=8", "poise.features={layer: -1, n_prompt: 4, n_response: 4}"]  # fmt: skip
PPO = ["estimator.name=gae", "allocator.options={k: 1}", "train.batch_size=16"]
PROBE = ["estimator.name=v05_eb", "estimator.options={scale: none}", "prior.name=probe",
         "prior.options={context_size: 64, min_context: 4, head_options: {n_components: 4}}",
         "poise.features={layer: -1, n_prompt: 4}"]  # fmt: skip
K1 = ["estimator.name=v05_eb", "estimator.options={scale: none}", "prior.name=history", "allocator.options={k: 1}"]


def _run(tmp_path, tiny_overrides, over):
    train(load_config(None, [*tiny_overrides, *over]), tmp_path / "run")
    return [r for r in rows_of(tmp_path / "run") if r["step"] > 0], rows_of(tmp_path / "run")


# -- the meter on literal masks ------------------------------------------------------------------------------------


def _masks():
    """Three rollouts of group 7 (prompt of 5 tokens) and one of group 2 (2 tokens), left-padded to 5; responses of
    3, 1, 2 and 4 tokens, right-padded to 4."""
    prompt = torch.tensor([[1, 1, 1, 1, 1]] * 3 + [[0, 0, 0, 1, 1]])  # (4, 5)
    response = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])  # (4, 4)
    return prompt, response, np.array([7, 7, 7, 2])


def test_meter_by_hand():
    """Generation: this trainer prefills 3·5 + 2 = 17 prompt tokens, the user 5 + 2 = 7; decode 3+1+2+4 = 10. A
    shared-prefix forward + backward (prompt rows [5, 2], rows [0, 0, 0, 1]): this trainer 3·(7 + 10) = 51, the user
    3·(17 + 10) = 81; an unshared forward is 17 + 10 = 27 for both; the probe's 6 counts for both."""
    prompt, response, group = _masks()
    meter = ComputeMeter()
    meter.generate(prompt, response, group)
    meter.forward("policy", prompt[[0, 3]], response, backward=True, rows=np.array([0, 0, 0, 1]))
    meter.forward("reference", prompt, response)
    meter.add("probe", 6)
    m = meter.metrics()
    assert (m["compute/prefill"], m["compute/decode"], m["compute_user/prefill"]) == (17, 10, 7)
    assert (m["compute/generate"], m["compute/policy"], m["compute/reference"], m["compute/probe"]) == (27, 51, 27, 6)
    assert (m["compute/update"], m["compute_user/update"]) == (51 + 27, 81 + 27)
    assert m["compute_step"] == 27 + 51 + 27 + 6 == sum(m[f"compute/{p}"] for p in PARTS)
    assert m["compute_user_step"] == 7 + 10 + 81 + 27 + 6


def test_meter_refuses_ambiguous_passes():
    """Deduplicated prompt rows without ``rows`` (whose prompt is whose?) and generation through ``forward`` are
    refused, so no pass can be counted without the user's side."""
    prompt, response, _ = _masks()
    meter = ComputeMeter()
    with pytest.raises(ValueError, match="rows="):
        meter.forward("policy", prompt[[0, 3]], response, backward=True)
    with pytest.raises(ValueError, match="generate"):
        meter.forward("generate", prompt, response)


# -- the update's passes by hand (tiny policy, real masks) ---------------------------------------------------------


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


@pytest.mark.parametrize(("k", "micro", "splits"), [(4, 256, 1), (4, 3, 2), (1, 256, 1)])
def test_update_passes_by_hand(policy, k, micro, splits):
    """One update of 4 prompts × k, ppo_epochs = 2, a KL reference, old log-probs recomputed: 2 × 3 + 2 + 1 = 9
    passes over the batch. The user's: 9 · (Σ_i P_i + Σ_i R_i) = 9 · (k Σ_g P_g + R); this trainer's:
    9 · (splits · Σ_g P_g + R), a group's prompt once per micro-batch that holds it (micro-batches of 3 over
    16 rollouts in groups of 4 — [0 0 0] [0 1 1] [1 1 2] [2 2 2] [3 3 3] [3] — cut every group in two).
    At k = 1 the two are equal."""
    model, tok = policy
    ro = HFEngine(model, tok, GenerationConfig(max_new_tokens=6), seed=0).generate(
        ["12+7=", "3-5=", "40+1=", "9*12="], [k] * 4
    )
    group = ro.prompt_index.copy()
    cfg = load_config(None, ["generation.max_new_tokens=6", "train.ppo_epochs=2", "loss.kl_coef=0.1",
                             f"train.micro_batch_size={micro}"])  # fmt: skip
    ref = load_policy(PolicyConfig(seed=0))[0].eval()
    meter, state = ComputeMeter(), {key: v.clone() for key, v in model.state_dict().items()}
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
        sched = LRSchedule(opt, lr=cfg.optim.lr, warmup_steps=0, schedule="constant", horizon=1.0)
        update_policy(cfg, model, ref, opt, sched, ro, group, np.ones(len(ro)), compute=meter, recompute_old_logp=True)
    finally:
        model.load_state_dict(state)
    p_g, r = int(ro.prompt_mask[::k].sum()), int(ro.lengths.sum())  # Σ_g P_g (groups are contiguous), Σ_i R_i
    assert meter.update == 9 * (splits * p_g + r) and meter.user_update == 9 * (k * p_g + r)
    assert meter.user["policy"] == 6 * (k * p_g + r) and meter.user["reference"] == 2 * (k * p_g + r)
    if k == 1:
        assert meter.user == meter.parts
    else:
        assert meter.user_update > meter.update


# -- the loop ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "over"), [("grpo", ["allocator.options={k: 4}"]), ("poise", POISE), ("ppo", PPO),
                                            ("probe", PROBE)])  # fmt: skip
def test_totals_are_cumulative_and_split_by_part(tmp_path, tiny_overrides, name, over):
    """compute_total, compute_user, their splits and tokens_total start at 0 (the step-0 eval row) and grow by each
    step's numbers; compute_step is the sum of the parts, and also prefill + decode + update + probe; decode is the
    step's generated tokens; generation counts every rollout's prompt and response."""
    steps, rows = _run(tmp_path, tiny_overrides, over)
    assert rows[0]["step"] == 0 and rows[0]["tokens_total"] == 0
    assert all(rows[0][key] == 0 for key in ("compute_total", *COMPUTE_TOTALS))
    step_keys = {"compute_total": "compute_step", "compute_user": "compute_user_step",
                 "prefill_total": "compute/prefill", "decode_total": "compute/decode", "update_total": "compute/update",
                 "prefill_user_total": "compute_user/prefill", "update_user_total": "compute_user/update"}  # fmt: skip
    totals, tokens = dict.fromkeys(step_keys, 0), 0
    for r in steps:
        assert r["compute_step"] == sum(r[f"compute/{p}"] for p in PARTS) > 0
        assert r["compute/update"] == sum(r[f"compute/{p}"] for p in UPDATE_PARTS)
        split = r["compute/prefill"] + r["compute/decode"] + r["compute/update"] + r["compute/probe"]
        assert r["compute_step"] == split
        assert r["compute_user_step"] == (r["compute_user/prefill"] + r["compute/decode"] + r["compute_user/update"]
                                          + r["compute/probe"])  # fmt: skip
        assert r["compute/decode"] == r["tokens_step"] and r["compute/generate"] > r["tokens_step"] > 0
        totals = {key: totals[key] + r[step] for key, step in step_keys.items()}
        tokens += r["tokens_step"]
        assert {key: r[key] for key in step_keys} == totals and r["tokens_total"] == tokens


def test_grpo_k4_by_hand_and_against_the_unshared_update(tmp_path, tiny_overrides):
    """GRPO k = 4, shared-prefix forward, float32 (no recompute), every group kept. With S = Σ_g P_g (from this
    trainer's generation: (generate − ΣR)/4, each rollout prefills its prompt) and R = Σ_i R_i:

        this trainer:  prefill 4S, decode R, update 3(S + R)        compute_step      = 7S + 4R
        the user:      prefill S,  decode R, update 3(4S + R)       compute_user_step = 13S + 4R

    so the user pays 6S more. With share_prompt_prefix = false this trainer's update is the user's, 3(4S + R), and
    only the prefix cache differs (compute_user_step = compute_step − 3S); step 1 draws the same rollouts in both
    runs (nothing has been updated yet), so the shared run's user update equals the unshared run's update."""
    shared, _ = _run(tmp_path / "shared", tiny_overrides, ["allocator.options={k: 4}"])
    plain, _ = _run(tmp_path / "plain", tiny_overrides, ["allocator.options={k: 4}", "train.share_prompt_prefix=false"])
    for r in shared:
        s, tokens = (r["compute/generate"] - r["tokens_step"]) / 4, r["tokens_step"]
        assert s == int(s) > 0
        assert (r["compute/prefill"], r["compute_user/prefill"]) == (4 * s, s)
        assert (r["compute/update"], r["compute_user/update"]) == (3 * (s + tokens), 3 * (4 * s + tokens))
        assert (r["compute_step"], r["compute_user_step"]) == (7 * s + 4 * tokens, 13 * s + 4 * tokens)
    for r in plain:
        s = (r["compute/generate"] - r["tokens_step"]) / 4
        assert r["compute_user/update"] == r["compute/update"] == 3 * (4 * s + r["tokens_step"])
        assert r["compute_user_step"] == r["compute_step"] - 3 * s
    assert plain[0]["tokens_step"] == shared[0]["tokens_step"]
    assert shared[0]["compute_user/update"] == plain[0]["compute/update"]
    assert shared[-1]["compute_user"] > shared[-1]["compute_total"]
    # the grids' recount from the parts older cells logged gives the logged compute_user_step exactly (at k = 4,
    # shared or not), and not at another k or with the prefix flag flipped
    for rows, flag in ((shared, True), (plain, False)):
        for r in rows:
            assert user_step_recount(r, 4, shared_prefix=flag) == r["compute_user_step"]
            assert user_step_recount(r, 2, shared_prefix=flag) != r["compute_user_step"]
            assert user_step_recount(r, 4, shared_prefix=not flag) != r["compute_user_step"]


@pytest.mark.parametrize("share", ["true", "false"])
def test_k1_user_pays_what_this_trainer_pays(tmp_path, tiny_overrides, share):
    """k = 1 (one rollout per prompt, a history-prior baseline): no group has a prompt to share, so the user's
    prefill, update and totals equal this trainer's on every row, whether or not the prefix is shared."""
    steps, rows = _run(tmp_path, tiny_overrides, [*K1, f"train.share_prompt_prefix={share}"])
    assert all(r["rollouts_per_prompt"] == 1 for r in steps)
    for r in steps:
        assert (r["compute_user/prefill"], r["compute_user/update"], r["compute_user_step"]) == (
            r["compute/prefill"], r["compute/update"], r["compute_step"])  # fmt: skip
        assert user_step_recount(r, 1, shared_prefix=share == "true") == r["compute_step"]
    assert all(r["compute_user"] == r["compute_total"] and r["update_user_total"] == r["update_total"] for r in rows)


def test_ppo_critic_and_poise_probe_are_charged(tmp_path, tiny_overrides):
    """PPO's separate critic (k = 1) costs a no-grad value pass and a forward + backward per epoch over the same
    tokens as generation: critic = 4 × generate. POISE's feature pass is one no-grad policy forward: recompute =
    policy / 3, for this trainer and for the user. At equal rollouts both spend more compute than GRPO's
    3·(ΣP + ΣR) + generation."""
    ppo, _ = _run(tmp_path / "ppo", tiny_overrides, PPO)
    assert all(r["compute/critic"] == 4 * r["compute/generate"] for r in ppo)
    assert all(r["compute_user_step"] == r["compute_step"] for r in ppo)  # k = 1: nothing shared
    poise, _ = _run(tmp_path / "poise", tiny_overrides, POISE)
    assert all(3 * r["compute/recompute"] == r["compute/policy"] > 0 for r in poise)
    # k = 2, shared: the user's feature pass and update carry both rollouts' prompts: 4 = 3 + 1 passes of S more
    for r in poise:
        s = (r["compute/generate"] - r["tokens_step"]) / 2
        assert r["compute_user/update"] - r["compute/update"] == 4 * s > 0


def test_probe_prior_prefills_are_charged(tmp_path, tiny_overrides):
    """The probe prior runs the policy over prompts every step (never cached): its token-passes are counted, in
    this trainer's compute and in the user's."""
    steps, _ = _run(tmp_path, tiny_overrides, PROBE)
    assert all(r["compute/probe"] > 0 for r in steps[1:])


# -- resume --------------------------------------------------------------------------------------------------------


def _cut_at_step_3(tmp_path, cfg):
    def die_at_3(row):
        if row["step"] == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_3)


def _last_rows(run_dir):
    return {r["step"]: r for r in rows_of(run_dir)}  # the last line of a step wins


def test_resume_continues_compute_user_exactly(tmp_path, tiny_overrides):
    """Killed after the step-2 checkpoint, resumed: every row's compute_user and splits, and the final state's
    counters, equal the uninterrupted run's (the counters are checkpointed, not recounted from 0)."""
    cfg = load_config(None, [*tiny_overrides, "train.steps=4", "run.checkpoint_every=2", "allocator.options={k: 4}"])
    train(cfg, tmp_path / "full")
    _cut_at_step_3(tmp_path, cfg)
    train(cfg, tmp_path / "cut", resume=True)
    full, cut = _last_rows(tmp_path / "full"), _last_rows(tmp_path / "cut")
    assert full.keys() == cut.keys() == {0, 1, 2, 3, 4}
    for step in (3, 4):
        assert {k: cut[step][k] for k in COMPUTE_TOTALS} == {k: full[step][k] for k in COMPUTE_TOTALS}
    assert cut[4]["compute_user"] > cut[2]["compute_user"] > 0
    state = [json.loads((d / "checkpoints" / "step_000004" / "state.json").read_text())["counters"]
             for d in (tmp_path / "full", tmp_path / "cut")]  # fmt: skip
    assert {k: state[0][k] for k in COMPUTE_TOTALS} == {k: state[1][k] for k in COMPUTE_TOTALS}


def test_a_checkpoint_without_compute_user_resumes_with_it_unknown(tmp_path, tiny_overrides):
    """A checkpoint written before compute_user existed (its counters lack the field) resumes with compute_user
    and the splits None (unknown: not counted from the run's start), while compute_total continues as before."""
    cfg = load_config(None, [*tiny_overrides, "train.steps=4", "run.checkpoint_every=2", "allocator.options={k: 4}"])
    _cut_at_step_3(tmp_path, cfg)
    state_file = tmp_path / "cut" / "checkpoints" / "step_000002" / "state.json"
    state = json.loads(state_file.read_text())
    for key in COMPUTE_TOTALS:
        del state["counters"][key]
    state_file.write_text(json.dumps(state))
    train(cfg, tmp_path / "cut", resume=True)
    rows = _last_rows(tmp_path / "cut")
    assert all(rows[s][k] is None for s in (3, 4) for k in COMPUTE_TOTALS)
    assert rows[4]["compute_total"] == rows[2]["compute_total"] + rows[3]["compute_step"] + rows[4]["compute_step"]


def test_spo_offline_init_is_counted_with_the_prefix_cache(tmp_path, tiny_overrides):
    """spo-offline draws offline_n = 4 rollouts of each of the 50 train prompts before step 1, counted from the
    step-0 row: this trainer prefills every rollout (4 Σ_p P_p), the user each prompt once (Σ_p P_p), and nothing is
    updated, so compute_user = compute_total − 3 Σ_p P_p; then SPO's k = 1 steps add the same to both."""
    spo = ["estimator.name=spo", "estimator.options={}", "prior.name=spo", "allocator.name=spo",
           "allocator.options={k: 1, pool_factor: 2}",
           "prior.options={offline: true, offline_n: 4, rho: constant}"]  # fmt: skip
    _, rows = _run(tmp_path, tiny_overrides, spo)
    init = rows[0]
    assert init["step"] == 0 and init["prefill_total"] == 4 * init["prefill_user_total"] > 0
    assert init["update_total"] == init["update_user_total"] == 0
    assert init["compute_total"] == init["prefill_total"] + init["decode_total"]
    assert init["compute_user"] == init["compute_total"] - 3 * init["prefill_user_total"]
    gap = init["compute_total"] - init["compute_user"]
    assert all(r["compute_total"] - r["compute_user"] == gap for r in rows)


def test_a_text_priors_encoder_is_counted_once_before_step_1(tmp_path, tiny_overrides, monkeypatch):
    """``combined`` embeds the pool's distinct texts with MiniLM once before step 1 (its prefetch): encoder_compute =
    round(Σ tokens × MiniLM's parameters ÷ the policy's), recounted here from the texts the prefetch received with
    sentence-transformers' own tokenizer; it is the step-0 totals (this trainer's and the user's), in every row's
    totals after, and the same on a run resumed from a checkpoint. A prior that reads no text (history) counts none."""
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415 (the [priors] extra, as the prior loads it)

    from v05.priors.encoders import default_sentence_model  # noqa: PLC0415
    from v05.priors.learned import EmbeddingProvider  # noqa: PLC0415
    from v05.train.policy import load_policy as load  # noqa: PLC0415

    seen: list[list[str]] = []
    real = EmbeddingProvider.prefetch
    def spy(self, texts):
        seen.append(list(texts))
        real(self, texts)

    monkeypatch.setattr(EmbeddingProvider, "prefetch", spy)
    over = ["prior.name=combined", "estimator.name=v05_eb", "allocator.options={k: 1}", "run.checkpoint_every=1"]
    steps, rows = _run(tmp_path, tiny_overrides, over)
    model = SentenceTransformer(default_sentence_model(), device="cpu")
    tokens = sum(min(len(t), 256) for t in model.tokenizer(list(dict.fromkeys(seen[0])))["input_ids"])
    encoder = sum(p.numel() for p in model.parameters())
    policy = sum(p.numel() for p in load(load_config(None, [*tiny_overrides, *over]).policy)[0].parameters())
    assert rows[0]["encoder_compute"] == round(tokens * encoder / policy) > 0
    assert rows[0]["compute_total"] == rows[0]["compute_user"] == rows[0]["encoder_compute"]
    assert all(r["encoder_compute"] == rows[0]["encoder_compute"] and r["compute/encoder"] == 0 for r in steps)
    assert steps[0]["compute_total"] == rows[0]["compute_total"] + steps[0]["compute_step"]

    def die_at_2(row):
        if row["step"] == 2:
            raise RuntimeError("killed")

    cfg = load_config(None, [*tiny_overrides, *over])
    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_2)
    train(cfg, tmp_path / "cut", resume=True)
    keys = ("encoder_compute", "compute_total", "compute_user")
    assert [[r[k] for k in keys] for r in rows_of(tmp_path / "cut")] == [[r[k] for k in keys] for r in rows]
    plain, _ = _run(tmp_path / "history", tiny_overrides, ["prior.name=history", "estimator.name=v05_eb"])
    assert all("encoder_compute" not in r and r["compute/encoder"] == 0 for r in plain)
