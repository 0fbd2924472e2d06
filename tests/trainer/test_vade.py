"""VADE (arXiv 2511.18902; trainer/algorithms/vade.py): the Beta posteriors with their
two-scale decay and the Thompson selection, each against a plain implementation written from
the authors' rule (their framework figure, VADE-RL.github.io: an eager decay of every prompt at
every update, lambda_1 for the observed, lambda_2 for the rest; one scalar draw at a time) on
random inputs; training through ``trainer.train`` on the simulated backend, the posterior mean in
every prompt's record, and a resume that selects as the uninterrupted run did; its options'
validation and documentation. The tiny model's steps are in tests/trainer/test_e2e_hf.py
(``test_vade_trains_on_the_hf_backend``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer import train
from trainer.algorithms import BatchContext, get_algorithm
from trainer.algorithms.vade import VADE_STATE, BetaPosteriors, thompson_select, vade_select
from trainer.backends.simulated import SimulatedBackend
from trainer.checkpoint import latest_checkpoint, read_state
from trainer.cli import simulate
from trainer.config import TrainConfig
from trainer.config_docs import config_reference
from trainer.recorders import ListRecorder
from trainer.types import Prompt


class PlainPosterior:
    """The authors' rule as their figure writes it: a (successes, failures) pair per prompt; at
    every update an observed ("selected") prompt's pair becomes lambda_1 * pair + (r, G - r),
    every other prompt's lambda_2 * pair; alpha = alpha_0 + successes, beta = beta_0 +
    failures."""

    def __init__(self, alpha0: float, beta0: float, lam: float, gamma: float) -> None:
        self.alpha0, self.beta0, self.lam, self.gamma = alpha0, beta0, lam, gamma
        self.pairs: dict[str, list[float]] = {}

    def update(self, observed: dict[str, tuple[int, int]]) -> None:
        for pid in set(self.pairs) | set(observed):
            pair = self.pairs.setdefault(pid, [0.0, 0.0])
            if pid in observed:
                pos, n = observed[pid]
                pair[0] = self.lam * pair[0] + pos
                pair[1] = self.lam * pair[1] + (n - pos)
            else:
                pair[0] *= self.gamma
                pair[1] *= self.gamma

    def params(self, pid: str) -> tuple[float, float]:
        s, f = self.pairs.get(pid, (0.0, 0.0))
        return self.alpha0 + s, self.beta0 + f


def plain_select(plain: PlainPosterior, ids: list[str], count: int, taken: set[int],
                 seed: int, step: int, score: str) -> list[int]:
    """One draw per prompt in the set's order from the step's stream, the informativeness of
    each, the ``count`` best not taken (the earlier prompt first among equals)."""
    rng = np.random.default_rng([seed, step, 31])   # seeds.VADE_THOMPSON, written out
    scored = []
    for i, pid in enumerate(ids):
        p = rng.beta(*plain.params(pid))
        s = p * (1 - p) ** 2 if score == "info-gain" else p * (1 - p)
        scored.append((-s, i))
    return [i for _, i in sorted(scored) if i not in taken][:count]


def test_posteriors_and_thompson_selection_match_the_plain_rule_on_random_inputs() -> None:
    rng = np.random.default_rng(2511)
    for trial in range(40):
        n_prompts = int(rng.integers(3, 40))
        ids = [f"q{int(k)}" for k in rng.permutation(1000)[:n_prompts]]
        alpha0, beta0 = rng.uniform(0.2, 5, 2)
        lam, gamma = rng.choice([0.0, 0.2, 0.5, 1.0]), rng.choice([0.8, 0.999, 1.0])
        score = ("info-gain", "variance")[trial % 2]
        module = BetaPosteriors(alpha0=alpha0, beta0=beta0, decay=lam, step_decay=gamma)
        plain = PlainPosterior(alpha0, beta0, lam, gamma)
        seed = int(rng.integers(0, 2**31))
        for step in range(1, 9):
            count = int(rng.integers(1, n_prompts + 1))
            taken = {int(t) for t in rng.choice(n_prompts, int(rng.integers(0, 3)))}
            chosen, _ = thompson_select(module, ids, count, taken, seed=seed, step=step,
                                        score=score)
            assert chosen == plain_select(plain, ids, count, taken, seed, step, score)
            # An update of some of the chosen: random counts out of random group sizes.
            upd = [ids[i] for i in chosen[:int(rng.integers(0, len(chosen) + 1))]]
            n = rng.integers(1, 17, len(upd))
            pos = rng.integers(0, n + 1)
            module.update(upd, pos, n)
            plain.update({pid: (int(p), int(k)) for pid, p, k in zip(upd, pos, n, strict=True)})
            a, b = module.params(ids)
            expected = np.array([plain.params(pid) for pid in ids])
            np.testing.assert_allclose(a, expected[:, 0], rtol=1e-12)
            np.testing.assert_allclose(b, expected[:, 1], rtol=1e-12)
        # The state round-trips whole.
        again = BetaPosteriors(alpha0=alpha0, beta0=beta0, decay=lam, step_decay=gamma)
        again.load_state_dict(module.state_dict())
        assert np.array_equal(np.stack(again.params(ids)), np.stack(module.params(ids)))


def test_selection_prefers_informative_prompts_and_decay_returns_to_the_prior() -> None:
    # Prompts certainly solved or failed (many observations) are scarcely ever chosen over
    # prompts near 1/3, and a prompt untouched for long drifts back to the prior.
    post = BetaPosteriors(decay=1.0, step_decay=0.9)
    ids = [f"p{i}" for i in range(30)]
    post.update(ids[:10], np.full(10, 200), np.full(10, 200))    # always right
    post.update(ids[10:20], np.zeros(10), np.full(10, 200))      # always wrong
    post.update(ids[20:], np.full(10, 70), np.full(10, 200))     # p ~ 0.35
    picks = [i for step in range(1, 21) for i in thompson_select(
        post, ids, 10, (), seed=0, step=step, score="info-gain")[0]]
    assert sum(i >= 20 for i in picks) == len(picks)
    for _ in range(300):
        post.update([], np.zeros(0), np.zeros(0))
    np.testing.assert_allclose(post.mean(ids), 0.5, atol=1e-6)
    # Without state (a visit rebuild of an old checkpoint) the selection starts from the prior.
    cfg = TrainConfig(algorithm="vade", batch_size=4).validate()
    prompts = [Prompt(i, i, "1") for i in ids]
    ctx = BatchContext(config=cfg, step=3, prompt_set=prompts, state=None)
    assert vade_select(ctx, 4, ()) == thompson_select(
        BetaPosteriors(), ids, 4, (), seed=cfg.seed, step=3, score="info-gain")[0]
    big = TrainConfig(algorithm="vade", batch_size=31).validate()
    with pytest.raises(ValueError, match="larger than the 30 prompts"):
        vade_select(BatchContext(config=big, step=1, prompt_set=prompts), 31, ())


def test_defaults_reproduce_the_authors_worked_example() -> None:
    # The authors' framework figure (VADE-RL.github.io, asset/main_framework.png): three
    # samples with counts (alpha, beta) = (0.1, 8.4), (2.7, 5.3), (9.0, 0.2) under the prior
    # Beta(1, 1); the first two selected, 1 and 4 of 8 right; the third not selected. After the
    # update: (1.02, 8.68), (4.54, 5.06), (8.991, 0.1998) (the figure prints the last beta as
    # 1.998, which no rate gives together with alpha's 9.0 -> 8.991).
    cfg = TrainConfig(algorithm="vade").validate()
    post = BetaPosteriors.from_config(cfg)
    post.load_state_dict({"updates": 5, "successes": {"a": 0.1, "b": 2.7, "c": 9.0},
                          "failures": {"a": 8.4, "b": 5.3, "c": 0.2},
                          "written": {"a": 5, "b": 5, "c": 5}})
    post.update(["a", "b"], np.array([1, 4]), np.array([8, 8]))
    a, b = post.params(["a", "b", "c"])
    np.testing.assert_allclose(a - 1, [1.02, 4.54, 8.991], rtol=1e-12)
    np.testing.assert_allclose(b - 1, [8.68, 5.06, 0.1998], rtol=1e-12)


def vade_config(**kw) -> TrainConfig:
    base = dict(backend="simulated", algorithm="vade", verifier="exact", batch_size=4,
                group_size=4, total_steps=6, save_every=2, eval_every=0, seed=3)
    return TrainConfig(**(base | kw))


def prompts(n: int = 12) -> list[Prompt]:
    return [Prompt(f"p{i}", f"q{i}", "x", {"pass_rate": (i % 4) / 4}) for i in range(n)]


def test_vade_trains_records_its_posterior_and_resumes_exactly(tmp_path: Path) -> None:
    full = ListRecorder()
    result = train(vade_config(), prompts(), SimulatedBackend(), full, out_dir=tmp_path / "a")
    assert result.status == "completed" and len(full.steps) == 6
    replay = BetaPosteriors()
    for step in full.steps:
        m = step.metrics
        assert m["samples"] == m["kept_samples"] == 16
        ids = [p.prompt_id for p in step.prompts]
        # The record's p_hat is the posterior mean before the step's sampling; no allocation.
        assert [p.p_hat for p in step.prompts] == pytest.approx(replay.mean(ids).tolist())
        assert all(p.allocated is None for p in step.prompts)
        assert m["vade_selected_mean"] == pytest.approx(np.mean(replay.mean(ids)))
        assert m["vade_selected_low"] <= m["vade_selected_mean"] <= m["vade_selected_high"]
        assert m["vade_selected_score"] >= m["vade_rest_score"]   # the top B of the draws
        assert m["vade_new_prompts"] == sum(i not in replay.written for i in ids)
        replay.update(ids, np.array([p.positives for p in step.prompts]),
                      np.array([p.samples for p in step.prompts]))
    assert read_state(latest_checkpoint(tmp_path / "a"))[VADE_STATE] == replay.state_dict()
    part = ListRecorder()
    train(vade_config(), prompts(), SimulatedBackend(), part, out_dir=tmp_path / "b",
          resume_from=tmp_path / "a" / "checkpoints" / "step-000002")
    assert [s.step for s in part.steps] == [3, 4, 5, 6]
    for a, b in zip(full.steps[2:], part.steps, strict=True):
        assert [(p.prompt_id, p.p_hat) for p in a.prompts] == [
            (p.prompt_id, p.p_hat) for p in b.prompts]
        assert [x.response for x in a.samples] == [x.response for x in b.samples]


def test_vade_async_selects_at_admission_and_learns_when_trained(tmp_path: Path) -> None:
    rec = ListRecorder()
    result = train(vade_config(max_policy_lag=1, total_steps=4, save_every=4), prompts(),
                   SimulatedBackend(), rec, out_dir=tmp_path)
    assert result.status == "completed" and len(rec.steps) == 4
    # Every trained prompt's counts reached the posterior, each update once.
    post = BetaPosteriors()
    for s in rec.steps:
        post.update([p.prompt_id for p in s.prompts],
                    np.array([p.positives for p in s.prompts]),
                    np.array([p.samples for p in s.prompts]))
    assert read_state(latest_checkpoint(tmp_path))[VADE_STATE] == post.state_dict()
    assert all(s.metrics["policy_lag_max"] <= 1 for s in rec.steps)
    # The simulator selects and learns the same way (a step at a time).
    rows = simulate("vade", [0.0, 0.3, 0.6, 1.0], steps=2, overrides={"batch_size": 2})
    assert all(len(s["prompts"]) == 2 and "allocated" not in s["prompts"][0]
               for s in rows["steps"])
    assert rows["steps"][0]["prompts"][0]["p_hat"] == 0.5   # the uniform prior's mean


def test_vade_options_are_validated_naming_them_and_documented() -> None:
    c = TrainConfig(algorithm="vade").validate()
    assert (c.vade_score, c.vade_prior_alpha, c.vade_prior_beta, c.vade_decay,
            c.vade_step_decay) == ("info-gain", 1.0, 1.0, 0.2, 0.999)
    assert c.max_samples_per_step == c.batch_size * c.group_size
    for key, bad in (("vade_prior_alpha", 0.0), ("vade_decay", 1.5), ("vade_step_decay", -0.1),
                     ("vade_score", "ucb")):
        assert [e.field for e in TrainConfig.dict_errors({"algorithm": "vade",
                                                          key: bad})] == [key]
    record = get_algorithm("vade")
    reference = config_reference()
    assert f"## {record.label} (`{record.name}`)" in reference
    assert "| `vade_step_decay` | `0.999` |" in reference
