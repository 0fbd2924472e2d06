"""Seed streams and prompt order: every random draw of a run, named.

A run's randomness derives from its seed and the step alone, never from a generator carried
from step to step: resuming from the checkpoint of step k replays step k+1 exactly as an
uninterrupted run would have drawn it (given the same weights and optimiser state), and a
scheduler or an engine that sees requests in another order draws the same samples.

- ``derive_seed(run seed, step, <stream>, ...)`` gives each use its own 63-bit seed; the
  streams of a step are ``GENERATION`` (the rounds' request seeds), ``DOWNSAMPLE`` (which pool
  samples a group keeps), ``UPDATE`` (mini-batch order) and ``EVAL`` (evaluation samples);
- numpy generators seeded by a short list ``[seed, ..., <stream>]`` order prompts: each epoch's
  permutation (``EPOCH_ORDER``), DAPO's further batches (``DAPO_BATCHES``) and VADE's
  Thompson draws (``VADE_THOMPSON``);
- the tools around a run draw from ``[seed, TOOLS, <stream>]``: the launch preflight's prompts,
  its subset of them for a short budget and its bootstrap (``PREFLIGHT_PROMPTS``,
  ``PREFLIGHT_SUBSET``, ``PREFLIGHT_BOOTSTRAP``), the step-time simulator's pass rates
  (``PASS_RATES``);
- ``request_seed`` is one sampling request's seed (``trainer.backends``).

Every named stream has its own key. numpy pads a shorter key with zeros (``[s, k]`` seeds as
``[s, k, 0]`` does), so a key is told apart by its values, not its length: a run's streams end
in 0-3 (``derive_seed``), 7, 11 or 31; the tools' keys hold ``TOOLS`` where a run's hold a step or
an epoch, which never reaches it (``tests/trainer/test_seeds.py`` checks every key a run, the
preflight and the simulators use is distinct).

The stream numbers are part of every recorded run: changing one changes what every run draws.
Until issue 28 the preflight's prompts and the simulator's pass rates were drawn from
``[seed, 11]``, the same key as each other (and, padded, as step 11's generation stream: as were
``[seed, 13]`` and ``[seed, 17]``, the preflight's subset and bootstrap, steps 13's and 17's);
since, the tools' keys are their own: a preflight measures another seeded subset of the prompts
(and simulates another subset of them when its budget is short, and resamples them otherwise
for its interval), and ``simulate-time --beta`` draws other pass rates, than before. No
training record changed: a run's keys are as they were.
"""

from __future__ import annotations

import hashlib

import numpy as np

# Sub-streams of derive_seed(run seed, step, <stream>, ...).
GENERATION = 0
DOWNSAMPLE = 1
UPDATE = 2
EVAL = 3
# Keys of numpy generators seeded [seed, epoch, EPOCH_ORDER] and [seed, step, DAPO_BATCHES].
EPOCH_ORDER = 7
DAPO_BATCHES = 11
# Key of the numpy generator seeded [seed, step, VADE_THOMPSON]: VADE's Thompson draws.
VADE_THOMPSON = 31
# The tools' keys: [seed, TOOLS, <stream>]. TOOLS is past any step or epoch a run can reach
# (total_steps <= 1,000,000), so none of them is a run's key.
TOOLS = 2**32 - 1
# The launch preflight's choice of prompts to measure ([seed, TOOLS, PREFLIGHT_PROMPTS]), of
# the measured pass rates it simulates when the response budget is short ([seed, TOOLS,
# PREFLIGHT_SUBSET]) and its bootstrap resamples of the measured prompts ([seed, TOOLS,
# PREFLIGHT_BOOTSTRAP]); the step-time simulator's pass rates ([seed, TOOLS, PASS_RATES]).
PREFLIGHT_PROMPTS = 17
PREFLIGHT_SUBSET = 13
PREFLIGHT_BOOTSTRAP = 23
PASS_RATES = 19


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from several integers (run seed, step, stream, round, ...): independent
    streams for every (step, round) so that resuming at step k replays exactly what an
    uninterrupted run would have drawn."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0]
               >> np.uint64(1))


def prompt_key(prompt_id: str) -> int:
    """A 64-bit integer standing for a prompt id in seed derivations (a hash, stable across
    processes, unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(prompt_id.encode(), digest_size=8).digest(), "big")


def request_seed(seed: int, prompt_id: str, sample: int) -> int:
    """The seed of one sampling request: sample ``sample`` of prompt ``prompt_id`` in a
    ``generate`` call seeded ``seed`` (itself ``derive_seed(run seed, step, stream, round)``).
    A function of those alone, so a prompt's samples do not depend on which other prompts share
    the call, and a resumed run or a per-prompt scheduler draws the same ones. 63 bits: torch
    generators take signed 64-bit seeds (a seed >= 2**63 raises an overflow)."""
    return derive_seed(seed, prompt_key(prompt_id), sample)


def batch_indices(num_prompts: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Prompt indices of ``step`` (1-based). Each epoch is a permutation seeded by (seed, epoch)
    cut into ``num_prompts // batch_size`` batches; the remainder of the permutation is dropped
    (a different remainder every epoch), as verl's ``drop_last`` does, so a batch never holds a
    prompt twice (per-prompt records are keyed by (run, step, prompt)). A function of
    (seed, step) only, so resume is free."""
    if num_prompts == 0:
        raise ValueError("no training prompts")
    if batch_size > num_prompts:
        raise ValueError(f"batch_size {batch_size} is larger than the {num_prompts} prompts")
    epoch, k = divmod(step - 1, num_prompts // batch_size)
    perm = np.random.default_rng([seed, epoch, EPOCH_ORDER]).permutation(num_prompts)
    return perm[k * batch_size:(k + 1) * batch_size].tolist()
