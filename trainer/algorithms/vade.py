"""VADE, Variance-Aware Dynamic sampling via online sample-level difficulty Estimation (Hu,
Qiu, Bai, Yang, Yuan, Jing, He, Zhang, arXiv 2511.18902), with GRPO as its policy update:

1. online sample-level difficulty estimation: every prompt x of the training set has a
   Beta(alpha_x, beta_x) posterior over its pass rate p_x, the prior Beta(alpha_0, beta_0)
   plus its decayed successes and failures (``BetaPosteriors``);
2. the Thompson sampler: each step draws one p~_x ~ Beta(alpha_x, beta_x) for every prompt of
   the set and admits the B prompts of largest expected informativeness of that draw,

       IG(p~) = p~ (1 - p~)^2   (``vade_score = "info-gain"``)   or   p~ (1 - p~)   ("variance")

   (``thompson_select``; the draws come from the step's own seed stream, ``seeds.VADE_THOMPSON``,
   so a run, and a resumed one, selects the same prompts);
3. GRPO's group update on them (n responses each, every one kept);
4. the posterior takes the step's counts, with the two-scale prior decay of the authors'
   framework figure (VADE-RL.github.io, ``asset/main_framework.png``): a prompt selected and
   observed in an update keeps lambda (``vade_decay``, 0.2: "fast adaptation", its pass rate
   moved the most as it was just trained on) of its evidence and takes its counts; every
   prompt not observed keeps gamma (``vade_step_decay``, 0.999: "gradual decay", the policy
   has moved whether the prompt was seen or not)::

       observed:      s_x <- lambda * s_x + positives_x,   f_x <- lambda * f_x + negatives_x
       not observed:  s_x <- gamma * s_x,                  f_x <- gamma * f_x
       alpha_x = alpha_0 + s_x,   beta_x = beta_0 + f_x

   kept lazily: a prompt's stored evidence is worth gamma^(age) of what was written, age the
   updates since it was written in which it was not observed; evidence that decays returns the
   posterior to the prior, never below it.

Under ``max_policy_lag > 0`` the producer admits prompts through the same ``select_batch``
(the posterior as trained so far) and the posterior takes a prompt's counts when an update
trains it (``async_trained``).

The posterior mean of each selected prompt before its sampling goes into its step record's
``p_hat`` (the prompt's history shows it per step); the run page charts the selected prompts'
posteriors (mean and 90% credible interval) against the rest. docs/paper-fidelity.md ("VADE")
says where each default comes from and what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer import seeds
from trainer.algorithms.base import Algorithm, BatchContext, SampledStep, StepContext
from trainer.algorithms.sampling import sample_batch
from trainer.allocation import Allocation
from trainer.charts import ChartSpec, Panel
from trainer.options import Option
from trainer.types import Metric, count, fraction

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from trainer.result import SamplerResult
    from trainer.types import Prompt

# trainer_state.json key of the posteriors (run state, like the weights).
VADE_STATE = "vade_posterior"
# The credible interval the run page draws around the selected prompts' posterior means.
CREDIBLE = (0.05, 0.95)


def info_gain(p: np.ndarray) -> np.ndarray:
    """p (1 - p)^2: largest at p = 1/3, so of two prompts equally far from a certain answer
    the harder one is the more informative."""
    return p * (1.0 - p) ** 2


def bernoulli_variance(p: np.ndarray) -> np.ndarray:
    """p (1 - p): the variance of a pass/fail reward, largest at p = 1/2."""
    return p * (1.0 - p)


# The expected informativeness of a drawn pass rate (``vade_score``).
SCORES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "info-gain": info_gain,
    "variance": bernoulli_variance,
}

OPTIONS = (
    Option("vade_score", "info-gain", "VADE: the informativeness of a Thompson draw p~ by which "
           "the batch is chosen, info-gain = p~(1-p~)^2 (as VADE is summarised: it favours "
           "prompts a little harder than even) or variance = p~(1-p~) (the pass/fail reward's "
           "variance).", choices=tuple(SCORES)),
    Option("vade_prior_alpha", 1.0, "VADE: alpha_0 of the Beta(alpha_0, beta_0) prior of every "
           "prompt's pass rate (1 with beta_0 = 1: uniform, every pass rate as likely before a "
           "prompt is seen).", "pseudo-successes", gt=0, le=1_000_000),
    Option("vade_prior_beta", 1.0, "VADE: beta_0 of the prior.", "pseudo-failures", gt=0,
           le=1_000_000),
    Option("vade_decay", 0.2, "VADE: lambda_1, the fast scale of the prior decay: a prompt "
           "selected and observed in an update keeps this share of its evidence before its "
           "counts are added (0.2: the authors' framework figure; 1: never forget).",
           ge=0, le=1),
    Option("vade_step_decay", 0.999, "VADE: lambda_2, the gradual scale of the prior decay: "
           "every update in which a prompt is not observed keeps this share of its evidence "
           "(0.999, the authors' framework figure: half of it after 693 updates; 1: off).",
           ge=0, le=1),
)


@dataclass
class BetaPosteriors:
    """Each prompt's decayed successes and failures, by prompt id, and the update at which they
    were written (run state: saved in checkpoints with ``state_dict``, restored with
    ``load_state_dict``). ``updates`` counts the updates taken; a prompt's evidence is worth
    gamma^(updates - written) of what was written: every update since, it was not observed."""

    alpha0: float = 1.0
    beta0: float = 1.0
    decay: float = 0.2         # lambda_1, an update that observes the prompt
    step_decay: float = 0.999  # gamma = lambda_2, an update that does not
    updates: int = 0
    successes: dict[str, float] = field(default_factory=dict)
    failures: dict[str, float] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    # The last Thompson draws, by (seed, step, updates, prompt ids): a step's selection and its
    # summary read the same draws, drawn once (``thompson_draws``). Not state: derived.
    _draws: tuple[tuple[Any, ...], np.ndarray] | None = field(default=None, repr=False,
                                                              compare=False)

    @classmethod
    def from_config(cls, config: Any) -> BetaPosteriors:
        return cls(alpha0=config.vade_prior_alpha, beta0=config.vade_prior_beta,
                   decay=config.vade_decay, step_decay=config.vade_step_decay)

    def evidence(self, prompt_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(successes, failures) of each prompt as of now, gamma-aged."""
        s = np.array([self.successes.get(i, 0.0) for i in prompt_ids], dtype=np.float64)
        f = np.array([self.failures.get(i, 0.0) for i in prompt_ids], dtype=np.float64)
        age = np.array([self.updates - self.written.get(i, self.updates) for i in prompt_ids],
                       dtype=np.float64)
        keep = np.power(self.step_decay, age)
        return s * keep, f * keep

    def params(self, prompt_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta) of each prompt's posterior."""
        s, f = self.evidence(prompt_ids)
        return self.alpha0 + s, self.beta0 + f

    def mean(self, prompt_ids: Sequence[str]) -> np.ndarray:
        a, b = self.params(prompt_ids)
        return a / (a + b)

    def update(self, prompt_ids: Sequence[str], positives: np.ndarray,
               samples: np.ndarray) -> None:
        """One update: these prompts' evidence (as aged by gamma until now) keeps lambda and
        takes their counts; every other prompt's ages by gamma (lazily: ``evidence``). An
        observed prompt is not aged by gamma in the update that observes it: the authors' two
        cases are exclusive."""
        if len(set(prompt_ids)) != len(prompt_ids):
            raise ValueError("a prompt appears twice in one update")
        s, f = self.evidence(prompt_ids)
        self.updates += 1
        pos = np.asarray(positives, dtype=np.float64)
        neg = np.asarray(samples, dtype=np.float64) - pos
        s, f = self.decay * s + pos, self.decay * f + neg
        for pid, si, fi in zip(prompt_ids, s.tolist(), f.tolist(), strict=True):
            self.successes[pid], self.failures[pid] = si, fi
            self.written[pid] = self.updates

    def state_dict(self) -> dict[str, Any]:
        """JSON-able: floats round-trip exactly through JSON, so a resumed run selects as the
        uninterrupted one did."""
        return {"updates": self.updates, "successes": dict(self.successes),
                "failures": dict(self.failures), "written": dict(self.written)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._draws = None
        self.updates = int(state["updates"])
        self.successes = {str(k): float(v) for k, v in state["successes"].items()}
        self.failures = {str(k): float(v) for k, v in state["failures"].items()}
        self.written = {str(k): int(v) for k, v in state["written"].items()}


def thompson_draws(posteriors: BetaPosteriors, prompt_ids: Sequence[str], seed: int,
                   step: int) -> np.ndarray:
    """One p~ ~ Beta(alpha_x, beta_x) per prompt, in the set's order, from step ``step``'s
    stream: a function of the seed, the step and the posteriors alone."""
    key = (seed, step, posteriors.updates, tuple(prompt_ids))
    if posteriors._draws is not None and posteriors._draws[0] == key:
        return posteriors._draws[1]
    a, b = posteriors.params(prompt_ids)
    draws = np.random.default_rng([seed, step, seeds.VADE_THOMPSON]).beta(a, b)
    posteriors._draws = (key, draws)
    return draws


def thompson_select(posteriors: BetaPosteriors, prompt_ids: Sequence[str], count: int,
                    taken: Collection[int], *, seed: int, step: int, score: str
                    ) -> tuple[list[int], np.ndarray]:
    """The ``count`` prompts (indices into ``prompt_ids``, none of ``taken``) of largest
    informativeness of their Thompson draw, best first (equal scores: the earlier prompt), and
    every prompt's score."""
    scores = SCORES[score](thompson_draws(posteriors, prompt_ids, seed, step))
    order = np.argsort(-scores, kind="stable")
    taken = taken if isinstance(taken, (set, frozenset, dict)) else set(taken)
    return [int(i) for i in order if int(i) not in taken][:count], scores


def vade_select(ctx: BatchContext, count: int, taken: Collection[int]) -> list[int]:
    """VADE's ``select_batch``: Thompson sampling over the whole set."""
    if ctx.config.batch_size > len(ctx.prompt_set):
        # As the epoch order refuses it (seeds.batch_indices): a step would train on fewer.
        raise ValueError(f"batch_size {ctx.config.batch_size} is larger than the "
                         f"{len(ctx.prompt_set)} prompts")
    posteriors = ctx.state if ctx.state is not None else BetaPosteriors.from_config(ctx.config)
    chosen, _ = thompson_select(posteriors, [p.id for p in ctx.prompt_set], count, taken,
                                seed=ctx.config.seed, step=ctx.step, score=ctx.config.vade_score)
    return chosen


@dataclass
class VadeSelection(Allocation):
    """What VADE's step records and metrics take from the selection: ``p_hat``, each selected
    prompt's posterior mean before sampling (its record's ``p_hat``; ``counts`` None: nothing is
    allocated), and ``summary``, the step metrics of the selection (``selection_summary``)."""

    summary: dict[str, float] = field(default_factory=dict)


def selection_summary(posteriors: BetaPosteriors, prompt_ids: Sequence[str],
                      chosen: Sequence[int], scores: np.ndarray) -> dict[str, float]:
    """The selected prompts' posteriors (mean and the CREDIBLE interval's ends, averaged) and
    their draws' scores, against those of the prompts not selected; how many of the selected
    had never been observed."""
    from scipy.special import betaincinv  # the Beta quantile; scipy only where a step runs

    a, b = posteriors.params(prompt_ids)
    mean = a / (a + b)
    sel = np.zeros(len(prompt_ids), dtype=bool)
    sel[list(chosen)] = True
    rest = ~sel

    def avg(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else 0.0

    return {"vade_selected_mean": avg(mean[sel]),
            "vade_selected_low": avg(betaincinv(a[sel], b[sel], CREDIBLE[0])),
            "vade_selected_high": avg(betaincinv(a[sel], b[sel], CREDIBLE[1])),
            "vade_rest_mean": avg(mean[rest]),
            "vade_selected_score": avg(scores[sel]), "vade_rest_score": avg(scores[rest]),
            "vade_new_prompts": float(sum(prompt_ids[i] not in posteriors.written
                                          for i in chosen))}


def sample_vade_step(ctx: StepContext) -> SampledStep:
    """The batch ``select_batch`` chose, sampled as GRPO samples it; then the posteriors take
    its counts. A cancelled step leaves them as they were."""
    posteriors: BetaPosteriors = ctx.state
    ids = [p.id for p in ctx.batch]
    set_ids = [p.id for p in ctx.prompt_set]
    summary: dict[str, float] = {}
    if ctx.batch_indices is not None and set_ids:
        # The scores of the draws that chose this batch (the same stream: the same draws).
        scores = SCORES[ctx.config.vade_score](
            thompson_draws(posteriors, set_ids, ctx.config.seed, ctx.step))
        summary = selection_summary(posteriors, set_ids, ctx.batch_indices, scores)
    selection = VadeSelection(p_hat=posteriors.mean(ids), weights=np.ones(len(ids)),
                              counts=None, scale=0.0, summary=summary)
    sampled = sample_batch(ctx)
    if sampled.result is not None:
        posteriors.update(ids, sampled.result.positives, sampled.result.samples)
    sampled.allocation = selection
    return sampled


def vade_trained(config: TrainConfig, posteriors: BetaPosteriors, prompts: Sequence[Prompt],
                 result: SamplerResult) -> None:
    """Asynchronous VADE: the posteriors take an update's prompts' counts when it trains them."""
    posteriors.update([p.id for p in prompts], result.positives, result.samples)


def vade_metrics(config: TrainConfig, res: SamplerResult,
                 allocation: Allocation | None) -> dict[str, float]:
    return dict(allocation.summary) if isinstance(allocation, VadeSelection) else {}


PASS_RATE = "posterior pass rate (0-1)"
CHARTS = (
    ChartSpec(
        name="vade_selection", title="VADE: posterior pass rate of the prompts it selected",
        panels=(
            Panel(PASS_RATE, (("vade_selected_mean", "selected: posterior mean"),
                              ("vade_selected_low", "selected: 5% quantile"),
                              ("vade_selected_high", "selected: 95% quantile"),
                              ("vade_rest_mean", "not selected: posterior mean"))),
            Panel("Thompson draw's informativeness (score)",
                  (("vade_selected_score", "selected"), ("vade_rest_score", "not selected"))),
            Panel("prompts (prompts)", (("vade_new_prompts", "selected, never observed"),)),
        ),
        caption="Look for the selected prompts' posterior mean staying away from 0 and 1 while "
                "the rest drift there (solved or hopeless prompts are left out), their "
                "interval narrowing as they are observed, and the new prompts selected falling "
                "once the set has been explored."),
)

STEP_METRICS: dict[str, Metric | str] = {
    "vade_selected_mean": fraction("mean posterior pass rate of the step's selected prompts "
                                   "before sampling", "selected posterior mean"),
    "vade_selected_low": fraction("mean 5% quantile of the selected prompts' posteriors",
                                  "selected 5% quantile"),
    "vade_selected_high": fraction("mean 95% quantile of the selected prompts' posteriors",
                                   "selected 95% quantile"),
    "vade_rest_mean": fraction("mean posterior pass rate of the prompts not selected",
                               "not selected posterior mean"),
    "vade_selected_score": Metric("mean informativeness (vade_score) of the selected prompts' "
                                  "Thompson draws", "score", 0.0, 0.25, "selected score"),
    "vade_rest_score": Metric("mean informativeness of the other prompts' Thompson draws",
                              "score", 0.0, 0.25, "not selected score"),
    "vade_new_prompts": count("selected prompts never observed before (still at the prior)",
                              "prompts", "new prompts selected"),
}

VADE = Algorithm(
    name="vade", label="VADE",
    help="VADE: the batch chosen by Thompson sampling of per-prompt Beta posteriors of the "
         "pass rate (the most informative draws), GRPO's group update on it",
    sampling="group", sample_step=sample_vade_step, select_batch=vade_select,
    advantage="group", std_normalize=True,
    step_metrics=STEP_METRICS, extra_metrics=vade_metrics, charts=CHARTS,
    make_state=BetaPosteriors.from_config, state_key=VADE_STATE,
    async_trained=vade_trained, options=OPTIONS,
    max_samples_per_prompt=lambda c: c.group_size,
    max_samples_per_step=lambda c: c.batch_size * c.group_size,
    step_shape="batch_size x group_size",
    match_budget=lambda c, budget: {"group_size": budget}, budget_match="exact",
    budget_note="group_size = budget: one round of budget responses for each prompt the "
                "Thompson sampler selects",
    summary_fields=("group_size",))
