"""What a pruning algorithm left out of the update, as step metrics and one run-page chart,
shared by the algorithms that drop completions (PODS's down-sample, DPPO's pruning): the
completions kept and pruned each step and the loss weights the kept ones carry (1 unless the
algorithm reweights: DPPO's importance weights 1 / keep probability).

The per-sample decisions themselves are in every run's records (``SampleRecord.kept`` and
``SampleRecord.weight``), so a prompt's history shows which of its completions each step kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainer.charts import ChartSpec, Panel
from trainer.types import count

if TYPE_CHECKING:
    from trainer.result import SamplerResult

PRUNING_METRICS = {
    "samples_pruned": count("responses drawn this step that the update left out (pruned or "
                            "down-sampled)", "samples", "pruned"),
    "loss_weight_mean": count("mean loss weight of the responses kept (1: unweighted)",
                              "weight", "mean loss weight"),
    "loss_weight_max": count("largest loss weight of a kept response", "weight",
                             "max loss weight"),
}

PRUNING_CHART = ChartSpec(
    name="pruning", title="Completions kept and pruned, and their loss weights",
    panels=(Panel("completions (responses)", (("kept_samples", "kept"),
                                              ("samples_pruned", "pruned"))),
            Panel("loss weight (x)", (("loss_weight_mean", "mean over kept"),
                                      ("loss_weight_max", "max over kept")))),
    caption="Each step's drawn completions split into those the update trained on and those "
            "it left out; below, the weight each kept completion's loss carried. Look for a "
            "weight above 1 whenever completions are pruned: that is the importance correction "
            "(DPPO); a weight of 1 with completions pruned is a plain down-sample (PODS).")


def pruning_metrics(res: SamplerResult) -> dict[str, float]:
    """The step's ``PRUNING_METRICS`` from what its keep rule decided."""
    kept = np.asarray(res.kept, dtype=bool)
    w = np.asarray(res.weights, dtype=np.float64)[kept]
    return {"samples_pruned": float(len(kept) - int(kept.sum())),
            "loss_weight_mean": float(w.mean()) if len(w) else 0.0,
            "loss_weight_max": float(w.max()) if len(w) else 0.0}
