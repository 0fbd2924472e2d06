"""Runs, prompts and the per-step / per-round / per-prompt / per-sample records of training.

Models carry constraints, not business logic: writes go through ``services``, reads through
``selectors``. Unique keys on (run, step[, round | prompt | index]) make every write idempotent,
so a resumed or redelivered run can never record a step twice.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class PromptSet(models.Model):
    class Source(models.TextChoices):
        UPLOAD = "upload", "uploaded file"
        BUILTIN = "builtin", "built-in arithmetic"

    name = models.CharField(max_length=200, unique=True)
    # experiments.names.name_key(name): the hash of the name's confusable skeleton (TR39), so
    # that no two sets' names look alike in a drop-down ("arithmetic" with a Cyrillic "а").
    name_key = models.CharField(max_length=64, unique=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="prompt_sets")
    class Status(models.TextChoices):
        READY = "ready", "ready"
        IMPORTING = "importing", "importing"
        FAILED = "failed", "import failed"

    size = models.PositiveIntegerField(default=0)
    # trainer.digest.PromptDigest of its prompts: sets with equal contents are found by it.
    content_hash = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # An upload is parsed off the request thread (experiments.services.prompt_import): the set
    # exists while it imports, its prompts appear all at once when it is ready, and a failed
    # import keeps the reason until the set is deleted or its name uploaded again.
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    import_rows = models.PositiveBigIntegerField(
        default=0, help_text="Prompts read so far while importing.")
    import_fraction = models.FloatField(
        null=True, blank=True, help_text="How far through the file the import is, 0-1.")
    import_error = models.TextField(blank=True)
    import_updated_at = models.DateTimeField(
        null=True, blank=True, help_text="The importer's last sign of life.")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(import_fraction__isnull=True)
                | models.Q(import_fraction__gte=0, import_fraction__lte=1),
                name="promptset_import_fraction_0_1"),
            models.CheckConstraint(
                condition=~models.Q(status="failed") | ~models.Q(import_error=""),
                name="promptset_failed_has_error"),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The key follows the name whoever writes it (the services, the admin, a fixture).
        from experiments.names import name_key

        self.name_key = name_key(self.name)
        if kwargs.get("update_fields") is not None and "name" in kwargs["update_fields"]:
            kwargs["update_fields"] = {*kwargs["update_fields"], "name_key"}
        super().save(*args, **kwargs)


class Prompt(models.Model):
    prompt_set = models.ForeignKey(PromptSet, on_delete=models.CASCADE, related_name="prompts",
                                   db_index=False)
    index = models.PositiveIntegerField(help_text="Position in the uploaded file (0-based).")
    text = models.TextField()
    answer = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["prompt_set", "index"]
        constraints = [models.UniqueConstraint(fields=["prompt_set", "index"],
                                               name="prompt_unique_index_in_set")]

    def __str__(self) -> str:
        return self.text[:60]


class Sweep(models.Model):
    """A named group of runs launched together: the product of a grid of config values over one
    base config (e.g. algorithm x seed). The runs carry their full configs; the sweep remembers
    how they were made, for its aggregate status, cancel-all and its report."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="sweeps")
    name = models.CharField(max_length=200)
    # A list, not a mapping: jsonb does not keep key order, and the axes' order is the order the
    # grid expands in (and the order run names list their values).
    grid = models.JSONField(help_text='The axes, in order: [{"field": ..., "values": [...]}], a '
                            'paired axis {"fields": [...], "values": [[...], ...]}.')
    base_config = models.JSONField(help_text="The config fields every run starts from; each run "
                                   "overrides the swept ones.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def fields(self) -> list[str]:
        """Every swept field, in axis order (a paired axis gives all of its fields)."""
        return [f for axis in self.grid for f in axis.get("fields", [axis.get("field")])]

    @property
    def axes_label(self) -> str:
        """The axes as crossed: "algorithm × seed", "(algorithm, group_size) × seed"."""
        return " × ".join(f"({', '.join(axis['fields'])})" if "fields" in axis
                          else axis["field"] for axis in self.grid)


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Retention(models.TextChoices):
        ALL = "all", "all response texts"
        KEPT = "kept", "texts of kept responses only"
        NONE = "none", "no response texts"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="runs")
    name = models.CharField(max_length=200)
    algorithm = models.CharField(max_length=16, db_index=True)
    config = models.JSONField(help_text="Full TrainConfig, validated before the run is stored.")
    prompt_set = models.ForeignKey(PromptSet, on_delete=models.PROTECT, related_name="runs")
    eval_set = models.ForeignKey(PromptSet, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="eval_runs")
    model = models.CharField(max_length=500)
    seed = models.IntegerField(default=0)
    queue = models.CharField(max_length=16, default="cpu")
    retention = models.CharField(max_length=8, choices=Retention.choices, default=Retention.ALL)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED,
                              db_index=True)
    total_steps = models.PositiveIntegerField()
    current_step = models.PositiveIntegerField(default=0, help_text="Last step recorded.")
    current_round = models.PositiveIntegerField(default=0)
    samples_spent = models.BigIntegerField(default=0)
    latest_real_reward = models.FloatField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # When the broker last took the run's task (None: never; the broker was down at launch).
    # The workers' sweep enqueues queued runs that never reached it.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # The lease: at most one worker executes a run; a lease whose heartbeat is older than the
    # timeout may be taken over (the worker died).
    lease_owner = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # The furthest step a database outage has found the run at (None: no outage has). An
    # outage gives its attempt back only when the run got past that step, so a database that
    # cuts every execution cannot loop a run forever.
    outage_step = models.PositiveIntegerField(null=True, blank=True)
    # What a leased run waits for before it trains, in words ("waiting for 8 GPUs on the Ray
    # cluster (4 free, 6 in all)", or its start's phase: "loading the model"); empty once it
    # trains. The wait is not training time: the
    # wall-time limit starts after it.
    waiting_for = models.CharField(max_length=300, blank=True, default="")
    # Each tracker the run is mirrored to (config ``mirror``, trainer.mirror), as its worker
    # last saw it: target, the tracker's run id, link, last step and evaluation delivered,
    # events lost, the last error.
    mirror_state = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    cloned_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="clones")
    # SET_NULL: runs are deleted through services.delete_run (their records first), never by a
    # cascade from elsewhere.
    sweep = models.ForeignKey(Sweep, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="runs")
    # The run's place in its sweep's grid (0: the first point), which its retry takes too: the
    # sweep's pages list its runs in this order.
    sweep_index = models.PositiveIntegerField(null=True, blank=True)
    # A failed or cancelled run of a sweep that a retry took the place of (services.retry_run):
    # it keeps its records and its error, but the sweep's status, compare and report count the
    # retry instead. SET_NULL: deleting the retry gives the point back to this run.
    replaced_by = models.OneToOneField("self", null=True, blank=True,
                                       on_delete=models.SET_NULL, related_name="replaces")
    # Where an imported run came from (experiments.imports): a hash of the folder's path, so
    # importing the same folder again updates this run instead of adding another.
    import_key = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="run_status_created")]
        constraints = [models.UniqueConstraint(fields=["import_key"], name="run_unique_import",
                                               condition=~models.Q(import_key=""))]

    def __str__(self) -> str:
        return f"{self.name} ({self.algorithm})"

    @property
    def progress(self) -> float:
        return self.current_step / self.total_steps if self.total_steps else 0.0

    @property
    def interrupted(self) -> bool:
        """Queued again after it trained (its worker shut down cleanly and handed it back):
        it resumes from its last checkpoint when a worker takes it."""
        return self.status == self.Status.QUEUED and self.current_step > 0


class Step(models.Model):
    """One training step. Chart columns are real columns so charts never parse JSON."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    step = models.PositiveIntegerField()
    metrics = models.JSONField(default=dict)
    real_reward = models.FloatField(null=True)
    kept_reward = models.FloatField(null=True)
    samples = models.PositiveIntegerField(default=0)
    # B x M x N x max_new_tokens can pass 2**31 within the config's bounds.
    tokens = models.PositiveBigIntegerField(default=0)
    wall_seconds = models.FloatField(default=0.0, help_text="Seconds since the run started.")
    # A world_size > 1 run's ranks this step: [{"rank", "role", "node", "device",
    # "generation_s", "update_s", "weight_gather_s", "engine_load_s"}, ...]
    # (trainer.types.RankRecord; role: "train", "rollout", or "train+rollout" where colocated,
    # absent from steps recorded before the rollout/train split); empty for a one-process run.
    ranks = models.JSONField(default=list, db_default=[], blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="step_unique")]


class RoundStat(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="round_stats",
                            db_index=False)
    step = models.PositiveIntegerField()
    round = models.PositiveSmallIntegerField()
    active_prompts = models.PositiveIntegerField()
    samples = models.PositiveIntegerField()
    positives = models.PositiveIntegerField()
    finished = models.PositiveIntegerField()
    tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["run", "step", "round"]
        constraints = [models.UniqueConstraint(fields=["run", "step", "round"],
                                               name="roundstat_unique")]


class PromptStep(models.Model):
    """One prompt in one step (B rows per step). Foreign keys unenforced by the database for the
    recorder's sake, as for ``Sample``."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="prompt_steps",
                            db_index=False, db_constraint=False)
    step = models.PositiveIntegerField()
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, db_index=False,
                               db_constraint=False)
    samples = models.PositiveSmallIntegerField()
    positives = models.PositiveSmallIntegerField()
    negatives = models.PositiveSmallIntegerField()
    rounds = models.PositiveSmallIntegerField()
    exit_round = models.PositiveSmallIntegerField(null=True, help_text="None: unresolved.")
    missing = models.CharField(max_length=16, blank=True)
    kept_positives = models.PositiveSmallIntegerField()
    kept_negatives = models.PositiveSmallIntegerField()
    baseline = models.FloatField()
    tokens = models.PositiveIntegerField(default=0)
    # Filled by an algorithm that allocates from a pass-rate estimate (``Algorithm.allocates``:
    # Reinforce-Ada Est); null for the others.
    p_hat = models.FloatField(null=True, help_text="Pass-rate estimate before this step's "
                              "sampling (Est).")
    allocated = models.PositiveSmallIntegerField(null=True, help_text="Samples allocated this "
                                                 "step (Est).")

    class Meta:
        ordering = ["run", "step", "prompt"]
        constraints = [models.UniqueConstraint(fields=["run", "step", "prompt"],
                                               name="promptstep_unique")]
        indexes = [models.Index(fields=["run", "prompt", "step"], name="promptstep_history")]


class Sample(models.Model):
    """One response. The most numerous rows (up to 10M per run), so they carry as little
    index and trigger work as integrity allows: the natural key is the primary key (no surrogate
    id and its second index), and the two foreign keys are not enforced by the database (a
    per-row trigger each, which cost the recorder most of its ingest rate). Integrity is kept by
    the application: runs are deleted through ``services.delete_run`` (records first), and a
    prompt set in use by a run cannot be deleted (``Run.prompt_set`` is PROTECT).

    The key leads with (run, step): a step's rows then append at the end of the index instead of
    landing in one place per prompt, so ingest stays as fast at step 600 as at step 1 (COPY of
    8,192 rows after 60 steps: 235k rows/s, against 183k with (run, prompt, step) first). A
    prompt's history reads its few shown steps with one probe per step."""

    pk = models.CompositePrimaryKey("run", "step", "prompt", "index")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples", db_index=False,
                            db_constraint=False)
    step = models.PositiveIntegerField()
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, db_index=False,
                               db_constraint=False)
    index = models.PositiveSmallIntegerField(help_text="Position in the prompt's pool this step.")
    round = models.PositiveSmallIntegerField()
    response = models.TextField(null=True, help_text="None when the retention policy dropped it.")
    tokens = models.PositiveIntegerField()
    reward = models.FloatField()
    kept = models.BooleanField()
    advantage = models.FloatField(null=True)
    verifier_error = models.TextField(blank=True)
    # Runs recorded before the algorithms could weight samples read 1 (db_default).
    weight = models.FloatField(default=1.0, db_default=1.0,
                               help_text="Its weight in the policy loss, set by the algorithm.")
    # Asynchronous runs (max_policy_lag > 0) only; null: generated by the step's own weights.
    policy_version = models.PositiveIntegerField(
        null=True, help_text="Optimiser steps applied to the weights that generated it "
        "(asynchronous training); null: the step's own weights, version step - 1.")
    # Runs that combine rewards (TrainConfig.rewards) only; null: the verifier alone.
    reward_components = models.JSONField(
        null=True, help_text="Each reward component's score by name (the run's rewards); a "
        "component that failed is null, its error in verifier_error; null: the verifier alone.")

    class Meta:
        ordering = ["run", "step", "prompt", "index"]


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=1000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique")]


class EvalResult(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="eval_results")
    step = models.PositiveIntegerField()
    metrics = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="evalresult_unique")]


class Estimate(models.Model):
    """A launch preflight: pass rates of a sample of a prompt set under a model and generation
    settings, measured on a worker, from which the dashboard predicts each algorithm's budget.

    ``key`` identifies what was measured (prompt set, model, sampling settings), so that asking
    again for the same thing returns this row instead of sampling twice."""

    Status = Run.Status  # a run's lifecycle words: queued, running, and how it ended
    ACTIVE_STATUSES = Run.ACTIVE_STATUSES

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="estimates")
    prompt_set = models.ForeignKey(PromptSet, on_delete=models.CASCADE, related_name="estimates")
    model = models.CharField(max_length=500)
    config = models.JSONField(help_text="The TrainConfig whose model, backend, generation "
                              "settings and verifier the sample uses.")
    key = models.CharField(max_length=64, db_index=True,
                           help_text="Hash of the prompt set, model and sampling settings.")
    queue = models.CharField(max_length=16, default="cpu")
    samples_per_prompt = models.PositiveIntegerField(help_text="k: responses per prompt.")
    num_prompts = models.PositiveIntegerField(help_text="Prompts sampled from the set.")
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED,
                              db_index=True)
    prompts_done = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Per sampled prompt: {"prompt_id", "rewards": [k floats], "errors": verifier errors}.
    results = models.JSONField(default=list, blank=True)
    tokens = models.BigIntegerField(default=0)
    time_generation = models.FloatField(default=0.0, help_text="Seconds generating.")
    time_scoring = models.FloatField(default=0.0, help_text="Seconds verifying.")
    # Predictions per (B, n, M, N): computed once per setting from the results.
    predictions = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"estimate {self.pk} of {self.prompt_set_id} with {self.model}"
