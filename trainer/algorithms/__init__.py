"""The algorithms, one record each (``Algorithm``), and the registry that every other module
asks: ``get_algorithm(name)``, ``algorithms()``, ``ALGORITHM_NAMES`` (``trainer.registry``).

Built in, in this order: GRPO (the baseline), DAPO, Reinforce-Ada Seq-pos and Seq-balance
(v1/v2's ada-pos and ada-balance), Reinforce-Ada Est, PODS (the first of the
adaptive-sampling family, issue 31), GVM-RAFT, VADE and DPPO. A new algorithm is one module
that builds a record and registers it (docs/architecture.md, "Adding an algorithm"); importing this
package registers the built-ins, and the registry imports it the first time it is asked."""

from __future__ import annotations

from trainer.algorithms.base import (
    ALGORITHM_NAMES,
    SAMPLING_KINDS,
    Algorithm,
    BatchContext,
    CrossCheck,
    SampledStep,
    StepContext,
    UnknownAlgorithm,
    UpdateFeedback,
    algorithms,
    balanced_target,
    baseline,
    choose_batch,
    get_algorithm,
    is_algorithm,
    own_batch,
    register_algorithm,
    step_metric_declarations,
    unregister_algorithm,
)
from trainer.algorithms.dapo import DAPO
from trainer.algorithms.dppo import DPPO
from trainer.algorithms.est import EST
from trainer.algorithms.grpo import GRPO
from trainer.algorithms.gvm_raft import GVM_RAFT
from trainer.algorithms.pods import PODS
from trainer.algorithms.sampling import sample_batch, sample_rounds
from trainer.algorithms.seq import SEQ_BALANCE, SEQ_POS
from trainer.algorithms.vade import VADE
from trainer.charts import ChartSpec, Panel
from trainer.options import Option
from trainer.registry import load_plugins

# The built-ins. Registration order is the order of every list of algorithms (the launch form,
# preflight, reports): the baseline first.
for _record in (GRPO, DAPO, SEQ_POS, SEQ_BALANCE, EST, PODS, GVM_RAFT, VADE, DPPO):
    register_algorithm(_record, replace=True)
# Then a deployment's own (RADA_ALGORITHMS).
load_plugins()

__all__ = ["ALGORITHM_NAMES", "DAPO", "DPPO", "EST", "GRPO", "GVM_RAFT", "PODS",
           "SAMPLING_KINDS", "SEQ_BALANCE", "SEQ_POS", "VADE",
           "Algorithm", "BatchContext", "ChartSpec", "CrossCheck", "Option", "Panel",
           "SampledStep", "StepContext",
           "UnknownAlgorithm", "UpdateFeedback", "algorithms", "balanced_target", "baseline",
           "choose_batch", "get_algorithm", "is_algorithm", "own_batch", "register_algorithm",
           "sample_batch", "sample_rounds", "step_metric_declarations", "unregister_algorithm"]
