"""Two example rewards for ``TrainConfig.rewards`` (docs/rewards.md), registered only where a
deployment names them (``RADA_REWARDS``): ``gsm8k``, a verl-style ``compute_score`` for GSM8K's
"#### 42" answers, and ``think_format``, a TRL-style batched format reward."""
