"""GRPO vs Reinforce-Ada (Seq-pos, Seq-balance, Est) on the built-in tiny model: run (or read)
the runs and summarise them as markdown tables.

    python benchmarks/study_algorithms.py [--runs-dir var/study] [--configs configs]
        [--steps K] [--seed S | --seeds 0,1,2] [--rerun] [--no-run] [--only grpo,ada-pos]
        [--target P] [--jobs J] [--set FIELD=VALUE ...] [--json FILE]

For each algorithm it uses ``<configs>/tiny-<algorithm>.toml`` (identical but for ``algorithm``)
and the run directory ``<runs-dir>/<algorithm>``; ``grpo-n8`` and ``grpo-n16`` are
``tiny-grpo.toml`` with ``group_size = 8`` / ``16`` (GRPO at Est's default budget of 8 samples per
prompt, and at about Seq-balance's). ``--jobs J`` runs up to J runs at once (each with one torch
thread, ``TRAINER_NUM_THREADS=1``; for a machine with J free cores), over every seed; with
``--seeds`` the last table gives means with 95% t-intervals over seeds. ``--target P`` trains on
a model warm-started to a 2-digit pass rate of P instead of the default 0.6 (a lower target is a
harder regime; the model is built once under ``var/models/tiny-target-P``).

A run whose ``events.jsonl`` already holds every step of its config is read, not rerun
(``--rerun`` forces a fresh run). Runs go one after another through ``python -m trainer run``
(one heavy job at a time on a shared machine); the wall time of each run is saved next to it
(``study_wall.json``). ``--steps``, ``--seed`` and ``--target`` override ``total_steps``, ``seed``
and ``model`` (the overridden config is written to ``<runs-dir>/<algorithm>.toml``, which is what
runs; use a different ``--runs-dir`` per seed and regime).

Summary per algorithm: zero-advantage group fraction (mean over steps), samples per step (mean)
and in total, real reward (mean of each prompt's first n samples, comparable across algorithms)
at start and end (means over the first and last ``--window`` steps, single steps are noisy),
held-out eval at step 0 and at the last eval step, and wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The async arms (issue 29's study): GRPO and Seq-balance at max_policy_lag k = 1, 2 with tis
# or vcpo (tis_cap 2: the hf backend's asynchronous runs need a cap).
ASYNC_ARMS = tuple(f"{base}-k{k}-{corr}" for base in ("grpo", "ada-balance") for k in (1, 2)
                   for corr in ("tis", "vcpo"))
ALGORITHMS = ("grpo", "ada-pos", "ada-balance", "grpo-n8", "ada-est", "grpo-n16", "dapo",
              "dapo-any", "grpo-16k", "dapo-16k", "grpo-matched", "gvm-raft", "pods", "vade",
              "dppo") + ASYNC_ARMS
# The arms that --budget B puts at B responses per prompt (trainer.budget: each algorithm's own
# keys); the others keep their config's budget (grpo: the n = 4 reference).
BUDGETED = ("grpo-matched", "dapo", "ada-pos", "ada-balance", "ada-est", "gvm-raft", "pods",
            "vade", "dppo")
# Study rows that are another config with overrides: name -> (config name, overrides).
# dapo-any: DAPO's further prompts from the whole rest of the set, earlier draws included (the
# only behaviour before dapo_further_prompts; the study's first DAPO rows).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo-n8": ("grpo", {"group_size": 8}), "grpo-n16": ("grpo", {"group_size": 16}),
    "dapo-any": ("dapo", {"dapo_further_prompts": "any"}),
    # On 16,384 prompts DAPO's further batches (at most 10 x 32 a step) never run out of fresh
    # prompts in 40 steps: no revisit at all; GRPO on the same set is its baseline (the held-out
    # set excludes the training prompts, so it differs a little from the 2,048-prompt arms').
    "dapo-16k": ("dapo", {"task_num_prompts": 16384}),
    "grpo-16k": ("grpo", {"task_num_prompts": 16384}),
    # The family of issue 31: the tiny GRPO config with another algorithm (its own options at
    # their defaults); grpo-matched is GRPO at --budget.
    "grpo-matched": ("grpo", {}),
    **{name: ("grpo", {"algorithm": name}) for name in ("gvm-raft", "pods", "vade", "dppo")},
    **{f"{base}-k{k}-{corr}": (base, {"max_policy_lag": k, "off_policy_correction": corr,
                                      "tis_cap": 2.0})
       for base in ("grpo", "ada-balance") for k in (1, 2) for corr in ("tis", "vcpo")}}
# pass@k columns of the confidence-interval table (every k <= eval_k that is here).
PASS_KS = (1, 2, 4, 8, 16, 32)


def read_run(run_dir: Path) -> dict[str, Any]:
    """Steps (metrics only) and evals of a run's events.jsonl, last record per step winning."""
    steps: dict[int, dict[str, float]] = {}
    evals: dict[int, dict[str, float]] = {}
    path = run_dir / "events.jsonl"
    if path.is_file():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:  # torn last line of a crashed run
                    continue
                if ev.get("type") == "step":
                    steps[int(ev["step"])] = ev["metrics"]
                elif ev.get("type") == "eval":
                    evals[int(ev["step"])] = ev["metrics"]
    wall = None
    wall_file = run_dir / "study_wall.json"
    if wall_file.is_file():
        wall = json.loads(wall_file.read_text()).get("wall_s")
    return {"steps": dict(sorted(steps.items())), "evals": dict(sorted(evals.items())),
            "wall_s": wall}


def run_config(config_path: Path, run_dir: Path, overrides: dict[str, Any]) -> Path:
    """The TOML that runs: the config itself, or a copy with ``overrides`` (top-level keys such
    as ``total_steps``, ``seed`` or ``model``) replacing the config's values."""
    if not overrides:
        return config_path
    lines = [ln for ln in config_path.read_text().splitlines()
             if ln.split("=")[0].strip() not in overrides]
    out = run_dir.parent / f"{run_dir.name}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    # json.dumps writes an int as TOML does, and a plain string as a TOML basic string.
    out.write_text("\n".join(lines + [f"{k} = {json.dumps(v)}" for k, v in overrides.items()])
                   + "\n")
    return out


def target_model(target: float) -> Path:
    """The tiny model warm-started to a 2-digit pass rate of ``target`` (built when missing)."""
    out = REPO / "var" / "models" / f"tiny-target-{target:g}"
    if not (out / "config.json").is_file():
        print(f"warm-starting {out} (target pass rate {target:g})", file=sys.stderr)
        # The target, not the default time limit, ends the warm start: on a loaded machine the
        # limit would cut it at a different model every time.
        subprocess.run([sys.executable, "-m", "trainer", "warmstart", "--out", str(out),
                        "--target-pass-rate", str(target), "--max-seconds", "7200"], cwd=REPO,
                       check=True)
    return out


def run_one(config_path: Path, run_dir: Path, env: dict[str, str] | None = None) -> float:
    import shutil

    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainer", "run", "--config", str(config_path),
                    "--out", str(run_dir), "--no-progress"], cwd=REPO, check=True, env=env)
    wall = time.perf_counter() - t0
    (run_dir / "study_wall.json").write_text(json.dumps({"wall_s": wall}))
    return wall


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarise(run: dict[str, Any], window: int) -> dict[str, Any]:
    steps = list(run["steps"].values())
    evals = run["evals"]
    first_eval = evals.get(0)
    last_step = max(evals) if evals else None
    last_eval = evals[last_step] if last_step not in (None, 0) else None
    wall = run["wall_s"]
    return {
        "steps": len(steps),
        "zero_adv": _mean([m["zero_adv_frac"] for m in steps]),
        "samples_step": _mean([m["samples"] for m in steps]),
        "samples_total": sum(m["samples"] for m in steps),
        "reward_start": _mean([m["real_reward"] for m in steps[:window]]),
        "reward_end": _mean([m["real_reward"] for m in steps[-window:]]),
        "eval0": first_eval,
        "eval_last": last_eval,
        "eval_last_step": last_step,
        "wall_s": wall,
        "wall_is_sum": wall is None,
        "step_s": _mean([m["time_step"] for m in steps]),
        "train_s": sum(m["time_step"] for m in steps),
        "evals": evals,
        # Reward against step and against cumulative samples (the curves of the study).
        "curve": [[st, m["real_reward"], cum] for st, m, cum in zip(
            run["steps"], steps, _cumsum([m["samples"] for m in steps]), strict=True)],
        "first_all_wrong": _mean([m["first_round_all_wrong"] for m in steps]),
        "gen_batches": _mean([m.get("gen_batches", 1.0) for m in steps]),
        # Of the prompt draws, those an earlier step drew too (runs before the metric: nan;
        # an arm without prompts_drawn draws its batch alone, 0 revisits within an epoch).
        "revisited": _revisited_share(steps),
        # Of the groups drawn, those without signal: DAPO drops them before the update (its
        # zero-adv frac over kept groups is 0 by construction); the others keep them.
        # Asynchronous arms (max_policy_lag > 0): the kept samples' lag, the ESS of their
        # importance ratios (its lowest step: where a collapse would show) and the stale drops.
        "lag_mean": _mean([m.get("policy_lag_mean", 0.0) for m in steps]),
        "ess_mean": _mean([m["ess"] for m in steps if "ess" in m]),
        "ess_min": min([m["ess"] for m in steps if "ess" in m], default=float("nan")),
        "stale_dropped": sum(m.get("samples_stale_dropped", 0.0) for m in steps),
        # Held-out evaluations against the samples and the training seconds spent by then.
        "eval_curve": [[st, ev, sum(m["samples"] for t, m in run["steps"].items() if t <= st),
                        sum(m["time_step"] for t, m in run["steps"].items() if t <= st)]
                       for st, ev in evals.items()],
        "drawn_zero": _mean([m["dropped_groups"] / m["prompts_drawn"] if "prompts_drawn" in m
                             else m["zero_adv_frac"] for m in steps]),
    }


def _revisited_share(steps: list[dict[str, float]]) -> float:
    revisits = sum(m.get("prompts_revisited", float("nan")) for m in steps)
    if "prompts_drawn" in (steps[0] if steps else {}):
        return revisits / max(sum(m["prompts_drawn"] for m in steps), 1.0)
    return 0.0 if revisits == 0 else float("nan")


def _cumsum(xs: list[float]) -> list[float]:
    out, total = [], 0.0
    for x in xs:
        total += x
        out.append(total)
    return out


def _fmt_eval(e: dict[str, float] | None, k: int) -> str:
    if not e:
        return "– | – | –"
    return f"{e['greedy_accuracy']:.3f} | {e[f'avg@{k}']:.3f} | {e[f'pass@{k}']:.3f}"


def render(summaries: dict[str, dict[str, Any]], window: int, k: int) -> str:
    base = summaries.get("grpo")
    out = []
    out.append(f"| algorithm | steps | zero-adv frac (mean) | samples/step | samples total "
               f"| samples / grpo | real reward, first {window} steps | real reward, last "
               f"{window} steps | wall s | s/step (train only) |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, s in summaries.items():
        ratio = (f"{s['samples_total'] / base['samples_total']:.2f}x"
                 if base and base["samples_total"] else "–")
        wall = "–" if s["wall_s"] is None else f"{s['wall_s']:.0f}"
        out.append(f"| {a} | {s['steps']} | {s['zero_adv']:.3f} | {s['samples_step']:.0f} | "
                   f"{s['samples_total']:.0f} | {ratio} | {s['reward_start']:.3f} | "
                   f"{s['reward_end']:.3f} | {wall} | {s['step_s']:.2f} |")
    out.append("")
    out.append(f"Held-out evaluation (greedy accuracy, avg@{k}, pass@{k}):")
    out.append("")
    out.append(f"| algorithm | step 0: greedy | avg@{k} | pass@{k} | last eval step "
               f"| greedy | avg@{k} | pass@{k} |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, s in summaries.items():
        out.append(f"| {a} | {_fmt_eval(s['eval0'], k)} | {s['eval_last_step']} | "
                   f"{_fmt_eval(s['eval_last'], k)} |")
    out.append("")
    out.append("Greedy accuracy at every eval step:")
    out.append("")
    eval_steps = sorted({st for s in summaries.values() for st in s["evals"]})
    out.append("| algorithm | " + " | ".join(f"step {st}" for st in eval_steps) + " |")
    out.append("| --- |" + " ---: |" * len(eval_steps))
    for a, s in summaries.items():
        cells = [f"{s['evals'][st]['greedy_accuracy']:.3f}" if st in s["evals"] else "–"
                 for st in eval_steps]
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plan(args: argparse.Namespace, runs_dir: Path, seed: int | None
         ) -> tuple[list[tuple[str, Path, Path, bool]], int]:
    """The runs of one seed: (arm, effective config, run dir, needs a run), and eval_k."""
    from trainer.cli import parse_overrides
    from trainer.config import TrainConfig

    out = []
    eval_k = 8
    model = None if args.target is None else str(target_model(args.target))
    for a in [x.strip() for x in args.only.split(",") if x.strip()]:
        base, variant = VARIANTS.get(a, (a, {}))
        cfg_path = Path(args.configs) / f"tiny-{base}.toml"
        run_dir = runs_dir / a
        overrides = variant | parse_overrides(args.set) | {key: val for key, val in (
            ("total_steps", args.steps), ("seed", seed), ("model", model)) if val is not None}
        if args.budget is not None and a in BUDGETED:
            overrides |= budget_keys(cfg_path, overrides, args.budget)
        effective = run_config(cfg_path, run_dir, overrides)
        config = TrainConfig.from_toml(effective)
        eval_k = config.eval_k
        run = read_run(run_dir)
        complete = len(run["steps"]) >= config.total_steps and run["wall_s"] is not None
        out.append((a, effective, run_dir, not args.no_run and (args.rerun or not complete)))
    return out, eval_k


def budget_keys(cfg_path: Path, overrides: dict[str, Any], budget: int) -> dict[str, Any]:
    """The config keys that put this arm's algorithm at ``budget`` responses per prompt."""
    import tomllib

    from trainer.budget import budget_overrides

    with open(cfg_path, "rb") as fh:
        config = tomllib.load(fh) | overrides
    return budget_overrides(config, budget)


def execute(runs: list[tuple[str, Path, Path, bool]], jobs: int) -> None:
    """Run what needs running, ``jobs`` at a time (one torch thread each when jobs > 1)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    # The arms in --only order across seeds (put the longest first: the pool then ends on
    # short runs instead of waiting on one long one).
    arms = list(dict.fromkeys(a for a, *_ in runs))
    todo = sorted(((a, cfg, d) for a, cfg, d, needed in runs if needed),
                  key=lambda t: arms.index(t[0]))
    env = dict(os.environ, TRAINER_NUM_THREADS="1") if jobs > 1 else None

    def one(item: tuple[str, Path, Path]) -> None:
        a, cfg, d = item
        print(f"running {a}: {cfg} -> {d}", file=sys.stderr, flush=True)
        run_one(cfg, d, env=env)

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(one, todo))


def collect(runs: list[tuple[str, Path, Path, bool]], window: int) -> dict[str, dict[str, Any]]:
    summaries: dict[str, dict[str, Any]] = {}
    for a, _, run_dir, _ in runs:
        run = read_run(run_dir)
        if not run["steps"]:
            print(f"{a}: no steps under {run_dir}", file=sys.stderr)
            continue
        if run["wall_s"] is None:  # written when the run ends: cut or still running
            print(f"{a}: incomplete under {run_dir} ({len(run['steps'])} steps), left out",
                  file=sys.stderr)
            continue
        summaries[a] = summarise(run, window)
    return summaries


def study(args: argparse.Namespace, runs_dir: Path, seed: int | None
          ) -> tuple[dict[str, dict[str, Any]], int]:
    """Run (when needed) and summarise each algorithm under ``runs_dir``; also return eval_k."""
    runs, eval_k = plan(args, runs_dir, seed)
    execute(runs, args.jobs)
    return collect(runs, args.window), eval_k


def render_mean(per_seed: dict[int, dict[str, dict[str, Any]]], window: int, k: int) -> str:
    """Means over seeds (min-max in brackets for the eval figures)."""
    algos = [a for a in ALGORITHMS if all(a in s for s in per_seed.values())]
    out = [f"| algorithm | seeds | zero-adv frac | samples total | real reward, first {window} "
           f"| real reward, last {window} | greedy, step 0 | greedy, end [min-max] "
           f"| avg@{k}, end | pass@{k}, end | wall s |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for a in algos:
        rows = [s[a] for s in per_seed.values()]

        def col(f: Any, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [f(r) for r in rows]

        greedy_end = col(lambda r: (r["eval_last"] or {}).get("greedy_accuracy", float("nan")))
        walls = [w for w in col(lambda r: r["wall_s"]) if w is not None]
        out.append(
            f"| {a} | {len(rows)} | {_mean(col(lambda r: r['zero_adv'])):.3f} | "
            f"{_mean(col(lambda r: r['samples_total'])):.0f} | "
            f"{_mean(col(lambda r: r['reward_start'])):.3f} | "
            f"{_mean(col(lambda r: r['reward_end'])):.3f} | "
            f"{_mean(col(lambda r: (r['eval0'] or {}).get('greedy_accuracy', float('nan')))):.3f}"
            f" | {_mean(greedy_end):.3f} [{min(greedy_end):.3f}-{max(greedy_end):.3f}] | "
            f"{_mean(col(lambda r: (r['eval_last'] or {}).get(f'avg@{k}', float('nan')))):.3f} | "
            f"{_mean(col(lambda r: (r['eval_last'] or {}).get(f'pass@{k}', float('nan')))):.3f}"
            f" | {_mean(walls):.0f} |")
    return "\n".join(out)


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of the 95% Student-t interval (0 for one value)."""
    import math

    from scipy import stats

    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, float(stats.t.ppf(0.975, len(xs) - 1)) * sd / math.sqrt(len(xs))


def _pm(xs: list[float], digits: int = 3) -> str:
    m, h = ci95(xs)
    return "–" if m != m else f"{m:.{digits}f} ± {h:.{digits}f}"


def render_ci(per_seed: dict[int, dict[str, dict[str, Any]]], window: int, k: int) -> str:
    """Means ± 95% t-intervals over seeds: cost, signal, reward and the last evaluation's
    greedy accuracy, avg@k and pass@j for j in PASS_KS (j <= k)."""
    algos = [a for a in ALGORITHMS if all(a in s for s in per_seed.values())]
    ks = [j for j in PASS_KS if j <= k]
    head = (f"| arm | zero-adv frac (kept) | drawn w/o signal | first-n all wrong | samples total "
            f"| batches/step | revisited draws | wall s "
            f"| real reward, last {window} | greedy | avg@{k} | "
            + " | ".join(f"pass@{j}" for j in ks) + " |")
    out = [head, "| --- |" + " ---: |" * (11 + len(ks) - 1)]
    nan = float("nan")
    if algos:
        # Step 0 is the warm start itself, evaluated with each seed's eval seed (every arm of a
        # seed evaluates the same weights with the same seed: one row).
        first = [s[algos[0]]["eval0"] or {} for s in per_seed.values()]
        out.append("| warm start (step 0) | | | | | | | | | "
                   f"{_pm([e.get('greedy_accuracy', nan) for e in first])} | "
                   f"{_pm([e.get(f'avg@{k}', nan) for e in first])} | "
                   + " | ".join(_pm([e.get(f"pass@{j}", nan) for e in first]) for j in ks)
                   + " |")
    for a in algos:
        rows = [s[a] for s in per_seed.values()]
        last = [r["eval_last"] or {} for r in rows]
        out.append(
            f"| {a} | {_pm([r['zero_adv'] for r in rows])} | "
            f"{_pm([r['drawn_zero'] for r in rows])} | "
            f"{_pm([r['first_all_wrong'] for r in rows])} | "
            f"{_pm([r['samples_total'] for r in rows], 0)} | "
            f"{_pm([r['gen_batches'] for r in rows], 2)} | "
            f"{_pm([r['revisited'] for r in rows], 2)} | "
            f"{_pm([r['wall_s'] for r in rows], 0)} | "
            f"{_pm([r['reward_end'] for r in rows])} | "
            f"{_pm([e.get('greedy_accuracy', nan) for e in last])} | "
            f"{_pm([e.get(f'avg@{k}', nan) for e in last])} | "
            + " | ".join(_pm([e.get(f"pass@{j}", nan) for e in last]) for j in ks) + " |")
    return "\n".join(out)


def _reward_at(curve: list[list[float]], cum: float, window: int) -> float:
    """Mean real reward over the ``window`` steps ending at the first step whose cumulative
    samples reach ``cum`` (nan when the run never spends that many)."""
    idx = next((i for i, (_, _, c) in enumerate(curve) if c >= cum), None)
    if idx is None:
        return float("nan")
    return _mean([r for _, r, _ in curve[max(0, idx - window + 1):idx + 1]])


def render_curves(per_seed: dict[int, dict[str, dict[str, Any]]], window: int) -> str:
    """Real reward against step (means over seeds of ``window``-step windows) and against
    cumulative samples (at the budgets the GRPO arms spend in their whole runs), ± 95% CI."""
    algos = [a for a in ALGORITHMS if all(a in s for s in per_seed.values())]
    if not algos:
        return ""
    steps = max(len(s[a]["curve"]) for s in per_seed.values() for a in algos)
    marks = list(range(window, steps + 1, window))
    out = ["Real reward against step (mean of the steps in the window ending there):", "",
           "| arm | " + " | ".join(f"steps {m - window + 1}-{m}" for m in marks) + " |",
           "| --- |" + " ---: |" * len(marks)]
    for a in algos:
        cells = [_pm([_mean([r for st, r, _ in s[a]["curve"] if m - window < st <= m])
                      for s in per_seed.values()]) for m in marks]
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    budgets = sorted({round(_mean([s[g]["samples_total"] for s in per_seed.values()]))
                      for g in ("grpo", "grpo-n8", "grpo-n16", "grpo-matched") if g in algos})
    if budgets:
        out += ["", f"Real reward against cumulative samples (mean of the {window} steps ending "
                "where a run reaches the budget; – where it never does):", "",
                "| arm | " + " | ".join(f"{b} samples" for b in budgets) + " |",
                "| --- |" + " ---: |" * len(budgets)]
        for a in algos:
            cells = [_pm([_reward_at(s[a]["curve"], b, window) for s in per_seed.values()])
                     for b in budgets]
            out.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# Paired comparisons (same seed): Reinforce-Ada against the baselines nearest its budget.
PAIRS = (("ada-balance", "grpo-n16"), ("ada-balance", "dapo"), ("ada-pos", "grpo-n8"),
         ("ada-pos", "grpo-n16"),
         ("ada-pos", "dapo"), ("ada-est", "grpo-n8"), ("dapo", "grpo"), ("dapo", "dapo-any"),
         ("dapo-any", "grpo"), ("dapo", "grpo-n16"), ("dapo-16k", "grpo-16k"),
         # The family at one budget: every method against GRPO at the same budget.
         *((a, "grpo-matched") for a in BUDGETED if a != "grpo-matched"),
         ("grpo-matched", "grpo"),
         # Async against its synchronous twin.
         *((a, a.split("-k")[0]) for a in ASYNC_ARMS),
         # vcpo against tis at the same lag.
         *((a, a.replace("-vcpo", "-tis")) for a in ASYNC_ARMS if a.endswith("-vcpo")))


def render_eval_curves(per_seed: dict[int, dict[str, dict[str, Any]]], k: int) -> str:
    """Held-out greedy accuracy and avg@k at every evaluation step against the samples and the
    training seconds (time_step summed: evaluation excluded) spent by then; means over seeds,
    accuracy ± 95% CI."""
    algos = [a for a in ALGORITHMS if all(a in s for s in per_seed.values())]
    out = [f"| arm | eval step | samples by then | train s by then | greedy | avg@{k} |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for a in algos:
        curves = [s[a]["eval_curve"] for s in per_seed.values()]
        for i, (st, *_rest) in enumerate(curves[0]):
            rows = [c[i] for c in curves if len(c) > i and c[i][0] == st]
            out.append(f"| {a} | {st} | {_mean([r[2] for r in rows]):.0f} | "
                       f"{_mean([r[3] for r in rows]):.0f} | "
                       f"{_pm([r[1]['greedy_accuracy'] for r in rows])} | "
                       f"{_pm([r[1][f'avg@{k}'] for r in rows])} |")
    return "\n".join(out)


def render_async(per_seed: dict[int, dict[str, dict[str, Any]]]) -> str:
    """The asynchronous arms' staleness: kept samples' mean lag, ESS (mean over steps, and its
    lowest step), stale samples dropped; means over seeds ± 95% CI."""
    algos = [a for a in ALGORITHMS if all(a in s for s in per_seed.values())
             and (a in ASYNC_ARMS or any(x.startswith(f"{a}-k") for x in ASYNC_ARMS))]
    out = ["| arm | lag of kept samples (mean) | ESS, mean over steps | ESS, lowest step "
           "| stale samples dropped | train s (sum of step times) |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for a in algos:
        rows = [s[a] for s in per_seed.values()]
        out.append(f"| {a} | {_pm([r['lag_mean'] for r in rows], 2)} | "
                   f"{_pm([r['ess_mean'] for r in rows])} | {_pm([r['ess_min'] for r in rows])} "
                   f"| {_pm([r['stale_dropped'] for r in rows], 0)} | "
                   f"{_pm([r['train_s'] for r in rows], 0)} |")
    return "\n".join(out)


def render_pairs(per_seed: dict[int, dict[str, dict[str, Any]]], window: int, k: int) -> str:
    """Differences A - B per seed (same seed: same warm start, data order and eval seed), mean
    ± 95% t-interval: samples, real reward over the last ``window`` steps, the last
    evaluation's greedy accuracy, avg@k and pass@j."""
    ks = [j for j in PASS_KS if j <= k]
    nan = float("nan")
    out = [f"| A - B | samples A / B | real reward, last {window} | greedy | avg@{k} | "
           + " | ".join(f"pass@{j}" for j in ks) + " |",
           "| --- |" + " ---: |" * (4 + len(ks))]
    for a, b in PAIRS:
        seeds = [s for s in per_seed.values() if a in s and b in s]
        if not seeds:
            continue

        def diff(f: Any, seeds: list[dict[str, Any]] = seeds, a: str = a, b: str = b
                 ) -> str:
            return _pm([f(s[a]) - f(s[b]) for s in seeds])

        def ev(key: str) -> Any:
            return lambda r: (r["eval_last"] or {}).get(key, nan)

        ratio = _mean([s[a]["samples_total"] / s[b]["samples_total"] for s in seeds])
        out.append(f"| {a} - {b} | {ratio:.2f} | {diff(lambda r: r['reward_end'])} | "
                   f"{diff(ev('greedy_accuracy'))} | {diff(ev(f'avg@{k}'))} | "
                   + " | ".join(diff(ev(f"pass@{j}")) for j in ks) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", default="var/study")
    ap.add_argument("--configs", default="configs")
    ap.add_argument("--steps", type=int, default=None, help="override total_steps")
    ap.add_argument("--seed", type=int, default=None, help="override seed")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds: one study per seed under <runs-dir>/seed<S>, "
                         "then a table of means over seeds")
    ap.add_argument("--window", type=int, default=10,
                    help="steps averaged for the start/end real reward (default 10)")
    ap.add_argument("--only", default=",".join(ALGORITHMS),
                    help=f"comma-separated algorithms (default all: {', '.join(ALGORITHMS)})")
    ap.add_argument("--target", type=float, default=None,
                    help="warm-start target pass rate of the model (default: builtin:tiny, "
                         "0.6); lower is a harder regime")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any other config field for every run, e.g. --set task_num_prompts=256 "
                         "(repeatable; values are TOML)")
    ap.add_argument("--rerun", action="store_true", help="rerun even when a run is complete")
    ap.add_argument("--no-run", action="store_true", help="only read existing runs")
    ap.add_argument("--json", default=None, help="also write the summaries to this JSON file")
    ap.add_argument("--budget", type=int, default=None,
                    help=f"responses per prompt of a step's batch for the arms "
                         f"{', '.join(BUDGETED)} (trainer.budget; default: each config's own)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at once (default 1); >1 gives each run one torch thread")
    args = ap.parse_args()
    for a in args.only.split(","):
        if a.strip() and a.strip() not in ALGORITHMS:
            ap.error(f"unknown algorithm {a.strip()!r}")
    runs_dir = Path(args.runs_dir)
    if args.seeds is None:
        summaries, k = study(args, runs_dir, args.seed)
        if args.json:
            Path(args.json).write_text(json.dumps(summaries, indent=2))
        print(render(summaries, args.window, k))
        return
    per_seed: dict[int, dict[str, dict[str, Any]]] = {}
    k = 8
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    plans = {}
    for seed in seeds:
        plans[seed], k = plan(args, runs_dir / f"seed{seed}", seed)
    # Every seed's runs in one pool: with --jobs the seeds run side by side.
    execute([r for seed in seeds for r in plans[seed]], args.jobs)
    for seed in seeds:
        per_seed[seed] = collect(plans[seed], args.window)
        print(f"### seed {seed}\n\n{render(per_seed[seed], args.window, k)}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(per_seed, indent=2))
    print(f"### mean over seeds {args.seeds}\n\n{render_mean(per_seed, args.window, k)}\n")
    print(f"### means ± 95% CI over seeds {args.seeds}\n\n"
          f"{render_ci(per_seed, args.window, k)}\n\n{render_curves(per_seed, args.window)}\n\n"
          f"Paired differences (same seed), mean ± 95% CI:\n\n"
          f"{render_pairs(per_seed, args.window, k)}\n\n"
          f"Held-out evaluation against samples and training time:\n\n"
          f"{render_eval_curves(per_seed, k)}\n\n"
          f"Asynchronous arms and their synchronous twins:\n\n{render_async(per_seed)}")


if __name__ == "__main__":
    main()
