"""One run across N ranks (``world_size > 1``): Ray places the ranks, each holds an FSDP2 shard
of the policy (``torch.distributed.fsdp.fully_shard``; NCCL on GPU, gloo on CPU) and its own
in-process vLLM engine with the full weights; the driver (the process that calls
``trainer.train``) keeps the sampler, the exit rules, the advantages, the metrics and the
recorder, and holds no model.

- ``rank.py``: ``Rank``, one rank as a plain class (no Ray import: torchrun runs it as is).

Nothing here is imported unless ``world_size > 1``.
"""
