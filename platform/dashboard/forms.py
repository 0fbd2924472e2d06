"""Forms. The launch form is generated from ``trainer.config.field_specs()`` (the config's fields
and every registered algorithm's own options) so every hyperparameter the trainer knows appears
with its default and help text, and a new trainer option shows up in the browser without
touching this file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django import forms
from django.conf import settings
from experiments import preflight, services
from experiments import selectors as experiment_selectors
from experiments.models import PromptSet, Run

from trainer.algorithms import algorithms
from trainer.config import (
    BUILTIN_MODEL,
    BUILTIN_TASK,
    CHOICE_FIELDS,
    TrainConfig,
    field_specs,
    recommended_lr,
)

from .selectors import DiffCell, RunSettings, settings_diff

# Set from the chosen prompt sets by the launch service, not typed by the user.
SERVICE_OWNED = ("prompts", "eval_prompts")
# Dropdowns for every choice field of the config (trainer.config.CHOICE_FIELDS); algorithms carry
# the dashboard's labels, schedulers what each one changes.
SCHEDULER_NOTES = {"per-prompt": " (same samples as round, no round barrier; vllm, simulated)",
                   "streaming": " (a different algorithm: favours short responses; vllm, "
                                "simulated)"}


def choices(name: str) -> list[tuple[str, str]] | None:
    """The dropdown of config field ``name`` (None: not a choice field), read when a form is
    built: an algorithm registered after this module was imported is offered too."""
    if name == "algorithm":
        return [(a.name, a.choice_label) for a in algorithms()]
    if name == "scheduler":
        return [(s, s + SCHEDULER_NOTES.get(s, "")) for s in CHOICE_FIELDS["scheduler"]]
    if name in CHOICE_FIELDS:
        return [(v, v) for v in CHOICE_FIELDS[name]]
    return None

GROUP_TITLES = {"algorithm": "Algorithm", "est": "Reinforce-Ada Est (ada-est only)",
                "model": "Model and generation",
                "optimisation": "Optimisation", "data": "Built-in task, verifier and rewards",
                "distributed": "GPUs and machines (world_size > 1: Ray, FSDP2, one engine per "
                               "rank, or rollout_ranks of engines apart)",
                "run": "Seed, checkpoints, evaluation and trackers"}


def _config_field(spec: dict[str, Any]) -> forms.Field:
    name, typ, default = spec["name"], spec["type"], spec["default"]
    help_text = spec["help"] + (f" Unit: {spec['unit']}." if spec["unit"] else "")
    common: dict[str, Any] = {"help_text": help_text, "initial": default, "label": name}
    options = choices(name)
    if options is not None:
        return forms.ChoiceField(choices=options, **common)
    if typ.startswith("bool") and "None" in typ:
        return forms.TypedChoiceField(
            choices=[("", "default"), ("true", "on"), ("false", "off")], required=False,
            coerce=lambda v: {"true": True, "false": False}.get(v), empty_value=None,
            **{**common, "initial": "" if default is None else str(default).lower()})
    if typ == "bool":
        return forms.BooleanField(required=False, **common)
    # The config's bounds become the input's min/max (an exclusive bound too: the browser
    # then allows the bound itself). Only the browser hint: the check and its message are the
    # config's own ("must be within (0, 100], got 0"), one wording for every field.
    attrs = {k: v for k, v in (("min", spec.get("ge", spec.get("gt"))),
                               ("max", spec.get("le", spec.get("lt")))) if v is not None}
    if typ == "int":
        return forms.IntegerField(widget=forms.NumberInput(attrs=attrs), **common)
    if typ == "int | None":  # empty: the algorithm's default
        return forms.IntegerField(required=False, widget=forms.NumberInput(attrs=attrs),
                                  **common)
    if typ == "float":
        return forms.FloatField(widget=forms.NumberInput(attrs={"step": "any", **attrs}),
                                **common)
    return forms.CharField(required=False, **common)


def queue_label(queue: str) -> str:
    """A queue in the launch form's dropdown: what its workers are, how many ranks fit, and,
    where its cluster declares them, how many of each role of a rollout/train split."""
    roles = [f"{role} ranks up to {most:,}"
             for role, most in (("rollout", settings.RUN_MAX_ROLLOUT_RANKS.get(queue)),
                                ("train", settings.RUN_MAX_TRAIN_RANKS.get(queue)))
             if most is not None]
    return (f"{queue}: {settings.RUN_QUEUE_HELP.get(queue, queue)}; world_size up to "
            f"{settings.RUN_MAX_WORLD_SIZE.get(queue, 1):,}"
            + (f" ({', '.join(roles)})" if roles else ""))


def registered_rewards() -> tuple[list[tuple[str, str]], str]:
    """The rewards a run may combine (``rewards``) as (name, docstring), the verifier first,
    and why the deployment's setting could not be read ("" when it could): the launch form
    lists them beside the field. Reads the registry (``trainer.reward_registry``), which
    imports the reward modules ``RADA_REWARDS`` names: light modules, no torch."""
    from trainer.reward_registry import VERIFIER, rewards

    verifier = [(VERIFIER, "The verifier chosen above (exact or math-verify): 1 for a correct "
                           "answer, else 0.")]
    try:
        return verifier + [(r.name, r.doc) for r in rewards()], ""
    except ValueError as exc:
        return verifier, str(exc)


def bounded_int(low: int, high: int | None = None, **kwargs: Any) -> forms.IntegerField:
    """An integer field whose bound errors read as the config's ("must be within [1, 100,000],
    got 200000"): Django's own say "Ensure this value is less than or equal to 100000"."""
    bounds = f"[{low:,}, {high:,}]" if high is not None else f"[{low:,}, ...)"
    message = f"must be within {bounds}, got %(show_value)s"
    return forms.IntegerField(min_value=low, max_value=high, error_messages={
        "min_value": message, "max_value": message}, **kwargs)


class NumbersAsTyped(forms.Form):
    """A form whose number inputs report text typed into them. The browser sends an empty
    value for a number input holding text ("12e", "1.2.3"), so the server saw "This field is
    required." or, for an optional field, nothing wrong at all; static/dashboard/forms.js names
    such inputs in ``_not_a_number`` and the field says what is wrong."""

    NOT_A_NUMBER = "_not_a_number"
    NOT_A_NUMBER_MESSAGE = "not a number: what was typed is not one (digits, e.g. 32 or 1e-4)"

    def full_clean(self) -> None:
        super().full_clean()
        getlist = getattr(self.data, "getlist", None)
        if not self.is_bound or getlist is None:
            return
        posted = set(getlist(self.NOT_A_NUMBER))
        for name in self.fields:
            if self.add_prefix(name) in posted:
                self.errors.pop(name, None)
                self.cleaned_data.pop(name, None)
                self.add_error(name, self.NOT_A_NUMBER_MESSAGE)


class PromptSetChoice(forms.ModelChoiceField):
    """A prompt set as the drop-down offers it: its name, whose it is and its size, the
    platform's own sets first, then the user's, then everyone else's (a name alone, listed
    newest first, put a look-alike upload above the set it imitated)."""

    def label_from_instance(self, obj: PromptSet) -> str:
        owner = obj.owner.username if obj.owner_id else "the platform"
        return f"{obj.name} · {owner} · {obj.size:,} prompts"


def prompt_set_choices(user: Any = None) -> Any:
    return experiment_selectors.prompt_set_choices(getattr(user, "pk", None))


class LaunchForm(NumbersAsTyped):
    name = forms.CharField(max_length=200, help_text="A name to find the run by.")
    # Sets imported whole: one still importing, or whose import failed, cannot train.
    prompt_set = PromptSetChoice(queryset=PromptSet.objects.filter(status="ready"),
                                 help_text="Training prompts (each with its owner).")
    eval_set = PromptSetChoice(queryset=PromptSet.objects.filter(status="ready"), required=False,
                               help_text="Held-out prompts for evaluation (optional).")
    queue = forms.ChoiceField(initial="cpu", help_text="Workers that may take the run.")
    retention = forms.ChoiceField(choices=Run.Retention.choices, initial=Run.Retention.ALL,
                                  help_text="Which response texts are stored.")
    # The preflight (the Estimate button): not part of the run.
    estimate_samples = bounded_int(
        1, preflight.MAX_K, required=False, initial=preflight.DEFAULT_K,
        label="responses per prompt (k)",
        help_text="Estimate: responses drawn per sampled prompt. Unit: responses.")
    estimate_prompts = bounded_int(
        1, preflight.MAX_PROMPTS, required=False, initial=preflight.DEFAULT_PROMPTS,
        label="prompts sampled",
        help_text="Estimate: a seeded random subset of the prompt set. Unit: prompts.")
    RUN_SHAPE = ("batch_size", "group_size", "samples_per_round", "max_rounds")
    sweep = forms.CharField(
        required=False, label="sweep over", max_length=2000,
        widget=forms.TextInput(attrs={"placeholder": "e.g. algorithm=grpo,ada-balance; "
                                      "seed=0,1,2   or   (algorithm, group_size)=(ada-balance, "
                                      "4), (grpo, 16); seed=0..2"}),
        help_text="Optional: launch a sweep, one run per combination of these values over the "
                  "settings below (fields separated by ';', values by ','; an integer range as "
                  "0..4). Fields in parentheses are paired, value for value, not crossed: "
                  "(algorithm, group_size)=(ada-balance, 4), (grpo, 16) is 2 runs, GRPO at the "
                  "budget of n=16. budget=16 puts every algorithm swept at one sampling "
                  "budget, 16 responses per prompt of the batch, through its own settings "
                  "(GRPO's n, PODS' rollouts, Est's budget, Seq's M x N as a cap): "
                  "algorithm=grpo,dapo,ada-balance,pods,vade; budget=16; an estimate then "
                  "predicts each one's samples per step at it. At most {max_runs:,} runs. The "
                  "name above names the sweep; its runs are named by their values.")

    def __init__(self, *args: Any, estimate: bool = False, user: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in ("prompt_set", "eval_set"):
            self.fields[field].queryset = prompt_set_choices(user)
        # An estimate launches nothing: it needs no run name.
        self.fields["name"].required = not estimate
        self.fields["sweep"].help_text = self.fields["sweep"].help_text.format(
            max_runs=settings.SWEEP_MAX_RUNS)
        # The queues as configured, each with what its workers are and how many ranks fit.
        self.fields["queue"].choices = [(q, queue_label(q)) for q in settings.RUN_QUEUES]
        self.config_groups: dict[str, list[str]] = {}
        # The titles of the groups of an algorithm's own options ("Toy (toy only)").
        self.group_titles: dict[str, str] = {}
        for spec in field_specs():
            if spec["name"] in SERVICE_OWNED:
                continue
            self.fields[spec["name"]] = _config_field(spec)
            self.config_groups.setdefault(spec["group"], []).append(spec["name"])
            if "group_title" in spec:
                self.group_titles.setdefault(spec["group"], spec["group_title"])
        self.fields["model"].widget.attrs["list"] = "model-choices"
        self.fields["rewards"].widget.attrs["placeholder"] = "e.g. verifier:1 format:0.1"
        self.registered_rewards, self.rewards_problem = registered_rewards()
        self.fields["model"].help_text = (
            f"{BUILTIN_MODEL} (warm-started tiny Qwen2) or a model the operator put under the "
            "model folders (RADA_MODEL_ROOTS): the list offers them. Under the simulated "
            "backend, any name: a label.")
        self.fields["model"].required = True
        self.fields["model"].initial = BUILTIN_MODEL
        # The paper's lr default is for 1.5B-7B models; the built-in model wants its own.
        self.fields["lr"].initial = recommended_lr(BUILTIN_MODEL)
        self.fields["lr"].widget.attrs["data-lr-by-model"] = json.dumps(
            {BUILTIN_MODEL: recommended_lr(BUILTIN_MODEL), "": recommended_lr("")})

    # The page's order: the run's own fields, the config's groups (``grouped``), the estimate's.
    RUN_FIELDS = ("name", "prompt_set", "eval_set", "queue", "retention", "sweep")
    ESTIMATE_FIELDS = ("estimate_samples", "estimate_prompts")

    def run_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in self.RUN_FIELDS]

    def estimate_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in self.ESTIMATE_FIELDS]

    def page_order(self) -> list[str]:
        """Every field's name in the order the page shows them."""
        return [*self.RUN_FIELDS, *(f.name for _, group in self.grouped() for f in group),
                *self.ESTIMATE_FIELDS]

    def error_fields(self) -> list[str]:
        """The fields with an error, in the page's order: the summary above the form lists
        them as the user meets them scrolling down."""
        return [name for name in self.page_order() if name in self.errors]

    def grouped(self) -> list[tuple[str, list[forms.BoundField]]]:
        order = ["algorithm", "est", "model", "optimisation", "data", "distributed", "run"]
        groups = sorted(self.config_groups, key=lambda g: order.index(g) if g in order else 99)
        return [(GROUP_TITLES.get(g) or self.group_titles.get(g, g),
                 [self[n] for n in self.config_groups[g]]) for g in groups]

    def run_shape(self) -> dict[str, int]:
        """B, n, M and N as entered (the defaults where a value did not parse)."""
        data = getattr(self, "cleaned_data", {})
        return {k: data.get(k) or self.fields[k].initial for k in self.RUN_SHAPE}

    def optimizer_steps(self) -> int:
        """Optimiser steps per training step, ppo_epochs x ceil(B / mini-batch), from the values
        as entered (the defaults where one did not parse): the launch form shows it beside the
        optimisation settings, because with 1 the PPO ratio stays 1 and clipping never acts."""
        data = getattr(self, "cleaned_data", {})
        shape = {k: data.get(k) if isinstance(data.get(k), int) else self.fields[k].initial
                 for k in ("batch_size", "ppo_mini_batch_size", "ppo_epochs")}
        return TrainConfig(**shape).optimizer_steps

    def config_dict(self) -> dict[str, Any]:
        """The config fields that passed the form's own checks (the others keep their
        defaults, so the remaining fields can still be checked)."""
        return {name: self.cleaned_data[name] for names in self.config_groups.values()
                for name in names if name in self.cleaned_data}

    def clean_sweep(self) -> services.Grid | None:
        """The grid of a sweep (None: launch one run)."""
        text = self.cleaned_data["sweep"].strip()
        if not text:
            return None
        try:
            return services.parse_sweep_spec(text)
        except services.LaunchError as exc:  # every bad axis, each its own message
            raise forms.ValidationError([reason for _, reason in exc.pairs]) from exc

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        # Every field at once: the CLI's config checks and the launch service's own, on the
        # values that passed the form's type checks; prompts come from the chosen set.
        # A field that did not parse keeps its default in the config: no check across fields
        # may read that default as the user's value ("must be <= batch_size (32)" under a
        # batch_size of "3e" says nothing true), so its name goes along as invalid.
        config = {**self.config_dict(), "prompts": BUILTIN_TASK, "eval_prompts": ""}
        checks = {"prompt_set": cleaned.get("prompt_set"), "queue": cleaned.get("queue", "cpu"),
                  "retention": cleaned.get("retention", "all"), "invalid": set(self.errors)}
        if cleaned.get("sweep"):
            # Every run of the sweep, checked as one run is.
            try:
                services.expand_sweep(cleaned.get("name") or "-", config, cleaned["sweep"],
                                      **checks)
            except services.LaunchError as exc:
                self.add_launch_errors(exc.pairs)
        else:
            self.add_launch_errors(services.launch_errors(
                config, name=cleaned.get("name") or "-", **checks))
        return cleaned

    def add_launch_errors(self, errors: Sequence[tuple[str, str]]) -> None:
        """Attach (field, reason) pairs to their fields, or to the form when the field is not
        on it; a field that already has an error from the form keeps just that one."""
        had_error = set(self.errors)
        for name, reason in errors:
            if name in had_error:
                continue
            target = name if name in self.fields else None
            self.add_error(target, reason if target else f"{name}: {reason}")


def initial_from_run(run: Run) -> dict[str, Any]:
    initial: dict[str, Any] = {k: v for k, v in (run.config or {}).items()
                               if k not in SERVICE_OWNED}
    if initial.get("std_normalize") is not None:
        initial["std_normalize"] = str(initial["std_normalize"]).lower()
    elif "std_normalize" in initial:
        initial["std_normalize"] = ""
    initial.update(name=clone_name(run),
                   prompt_set=run.prompt_set_id, eval_set=run.eval_set_id, queue=run.queue,
                   retention=run.retention)
    return initial


def clone_name(run: Run) -> str:
    """The name a clone of ``run`` starts with: the source's and " (clone)". A sweep's run
    keeps its sweep's name and the values it was swept at ("study [algorithm=grpo, seed=1]
    (clone)"), the values whole however long the sweep's name: the clone belongs to no sweep,
    and its name is what still says where it came from."""
    if run.sweep is None:
        return services.derived_run_name(run.name, " (clone)")
    return services.sweep_run_name(run.sweep.name, services.run_point(run), " (clone)")


def clone_diff(form: LaunchForm, source: Run) -> list[tuple[str, list[DiffCell]]]:
    """The settings of the valid form that resolve otherwise than the source run's, as
    ``selectors.settings_diff`` finds them: [source's cell, this launch's cell]."""
    d = form.cleaned_data
    launch = RunSettings(form.config_dict(), d["prompt_set"], d["eval_set"], d["queue"],
                         d["retention"])
    return settings_diff([RunSettings.of(source), launch])


class UploadForm(forms.Form):
    name = forms.CharField(max_length=200)
    file = forms.FileField(help_text="JSONL or Parquet with 'prompt' and 'answer' per record "
                           "(verl layout with reward_model.ground_truth accepted).")

    REJECTED = "Rejected, nothing imported: "

    def __init__(self, *args: Any, rejected: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rejected = rejected

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.rejected:
            # The file was dropped while it streamed in (webapp.uploads): say why, not that
            # the field is empty.
            self.errors.pop("file", None)
            self.add_error("file", self.REJECTED + self.rejected)
        return cleaned

    def clean_file(self) -> Any:
        # Its size was held to PROMPT_UPLOAD_MAX_BYTES while it streamed in (webapp.uploads).
        f = self.cleaned_data["file"]
        if not f.name.lower().endswith((".jsonl", ".json", ".parquet")):
            raise forms.ValidationError("expected a .jsonl or .parquet file")
        return f

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        problem = services.prompt_set_name_error(name)
        if problem:
            raise forms.ValidationError(problem)
        return name


class BuiltinForm(NumbersAsTyped):
    name = forms.CharField(max_length=200, initial="arithmetic")
    task = forms.ChoiceField(
        choices=[("arithmetic", "arithmetic: a+b=, the sum's digits reversed"),
                 ("arithmetic-long", "arithmetic-long: 2-8 operands, every running sum reversed "
                                     "(longer answers; at most 4 digits)")],
        initial="arithmetic", required=False, help_text="Which built-in task.")
    num_prompts = bounded_int(1, 100_000, initial=2048, help_text="Unit: prompts.")
    min_digits = bounded_int(1, 9, initial=1, help_text="Fewest digits of an operand.")
    max_digits = bounded_int(1, 9, initial=3, help_text="Most digits of an operand.")
    seed = bounded_int(0, initial=0, help_text="Seed of the generator.")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        problem = services.prompt_set_name_error(name)
        if problem:
            raise forms.ValidationError(problem)
        return name

    def clean_task(self) -> str:
        return self.cleaned_data["task"] or "arithmetic"  # a post without it: the plain task

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        lo, hi = cleaned.get("min_digits"), cleaned.get("max_digits")
        if lo and hi and lo > hi:
            self.add_error("max_digits", "must be >= min_digits")
        return cleaned
