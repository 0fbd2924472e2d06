"""Every named random stream has a key of its own (trainer/seeds.py): no two streams of a run, a
preflight or the simulators seed a generator from the same entropy, numpy's zero padding of a
short key included."""

from __future__ import annotations

from trainer import seeds

SEEDS = range(3)
STEPS = range(1, 401)


def entropy(*key: int) -> tuple[int, ...]:
    """The key as numpy's SeedSequence mixes it: trailing zeros do not count."""
    out = list(key)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def test_no_two_streams_share_a_key() -> None:
    streams: dict[str, set[tuple[int, ...]]] = {
        # a run: derive_seed(seed, step, stream[, round or batch]); the epoch order; DAPO's
        "derive": {entropy(s, t, stream, *extra) for s in SEEDS for t in STEPS
                   for stream in (seeds.GENERATION, seeds.DOWNSAMPLE, seeds.UPDATE, seeds.EVAL)
                   for extra in ((), *((k,) for k in range(1, 11)))},
        "epoch order": {entropy(s, e, seeds.EPOCH_ORDER) for s in SEEDS for e in range(400)},
        "dapo batches": {entropy(s, t, seeds.DAPO_BATCHES) for s in SEEDS for t in STEPS},
        "vade thompson": {entropy(s, t, seeds.VADE_THOMPSON) for s in SEEDS for t in STEPS},
        # the tools around a run
        **{name: {entropy(s, seeds.TOOLS, key) for s in SEEDS}
           for name, key in (("preflight prompts", seeds.PREFLIGHT_PROMPTS),
                             ("preflight subset", seeds.PREFLIGHT_SUBSET),
                             ("preflight bootstrap", seeds.PREFLIGHT_BOOTSTRAP),
                             ("pass rates", seeds.PASS_RATES))},
    }
    names = list(streams)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not streams[a] & streams[b], (a, b)
    keys = (seeds.EPOCH_ORDER, seeds.DAPO_BATCHES, seeds.VADE_THOMPSON, seeds.PREFLIGHT_PROMPTS,
            seeds.PREFLIGHT_SUBSET, seeds.PREFLIGHT_BOOTSTRAP, seeds.PASS_RATES)
    assert len(set(keys)) == len(keys)
