"""The built-in model's and tasks' names, as a config names them, and the limits they set.

No imports: the config (its defaults) and its validation (the checks that name them) both read
these, and the web process imports both.
"""

from __future__ import annotations

BUILTIN_MODEL = "builtin:tiny"
BUILTIN_TASK = "builtin:arithmetic"
# The long-answer variant (trainer.tasks.arithmetic_long_prompts): 2-8 operands, every running
# sum, answers of a few to ~35 tokens, for workloads whose response lengths must vary.
BUILTIN_LONG_TASK = "builtin:arithmetic-long"
BUILTIN_TASKS = (BUILTIN_TASK, BUILTIN_LONG_TASK)
# What the built-in tiny model trains with (docs/architecture.md). The ``lr`` default is the
# paper's 1e-6 for 1.5B-7B models, at which the tiny model hardly moves.
BUILTIN_MODEL_LR = 2e-4
# The long variant's largest operand (trainer.tasks.LONG_MAX_DIGITS; not imported: trainer.tasks
# is no business of the web process that validates configs).
LONG_MAX_DIGITS = 4
