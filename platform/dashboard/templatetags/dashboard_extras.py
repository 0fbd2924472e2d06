from typing import Any

from django import template

from dashboard.selectors import is_eval_fraction, run_shape
from trainer import formatting
from trainer.preflight import INTERVAL_LEVEL

register = template.Library()

@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """Look a key up in a dict (templates cannot subscript with a variable)."""
    return mapping.get(key, key)


@register.filter(name="run_shape")
def run_shape_filter(run: Any) -> dict[str, str]:
    """The run's batch and sampling settings in words (``selectors.run_shape``)."""
    return run_shape(run)


@register.filter
def percent(value: float | None) -> str:
    """A fraction in [0, 1] as a whole percentage ("41%"); a dash when missing."""
    return "–" if value is None else f"{100 * value:.0f}%"


@register.filter
def eval_summary(metrics: dict[str, Any] | None) -> str:
    """An evaluation row in words: fractions with three decimals, then counts as integers
    ("step 40: avg@4 0.412 · greedy accuracy 0.470 · pass@4 0.600 (200 prompts, k = 4)")."""
    if not metrics:
        return "–"
    counts = {"prompts": "{} prompts", "k": "k = {}", "verifier_errors": "{} verifier errors"}
    values = {k: v for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))}
    fractions = [f"{'greedy accuracy' if k == 'greedy_accuracy' else k} {v:.3f}"
                 for k, v in sorted(values.items()) if is_eval_fraction(k)]
    others = sorted(k for k in values if not is_eval_fraction(k) and k not in counts)
    whole = [counts.get(k, k + " {}").format(int(values[k]))
             for k in [*(k for k in counts if k in values), *others]]
    text = " · ".join(fractions) + (f" ({', '.join(whole)})" if whole else "")
    return f"step {metrics['step']}: {text}" if "step" in metrics else text


@register.filter
def thousands(value: int | None) -> str:
    """An integer with thousands separators ("1,234,567")."""
    return "–" if value is None else f"{int(value):,}"


@register.filter
def number(value: float | int | None) -> str:
    """A number as the whole platform writes one (``trainer.formatting.number``: "26,688",
    "0.0005"); a dash when missing. Strings (a setting's words) pass through."""
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return formatting.number(value)
    return str(value)


@register.filter
def count(value: float | int | None, noun: str) -> str:
    """``value`` with its noun in the right number: ``{{ n|count:"prompt" }}`` -> "1 prompt",
    "2,048 prompts"."""
    return "–" if value is None else formatting.count(value, noun)


@register.simple_tag
def mean_ci(row: dict[str, Any], column: str, digits: int = 3, unit: str = "") -> str:
    """``row[column] ± row[column_ci95]`` with ``digits`` decimals, then ``unit`` ("–" alone
    when unknown); the half-width is left out when there is none (a single seed)."""
    mean, half = row.get(column), row.get(f"{column}_ci95")
    if mean is None:
        return "–"
    text = f"{mean:,.{digits}f}"
    text += f" ± {half:,.{digits}f}" if half is not None else ""
    return f"{text} {unit}" if unit else text


@register.filter
def spend_interval(row: dict[str, Any]) -> str:
    """How sure a preflight row's samples per step is: "95%: 330–444" (its interval over the
    sampled prompts, ``trainer.preflight.predict``), "exact" (every simulated step spent the
    algorithm's fixed budget), "" for a row without one."""
    if row.get("spend_fixed"):
        return "exact"
    low, high = row.get("samples_per_step_low"), row.get("samples_per_step_high")
    if low is None or high is None:
        return ""
    return f"{INTERVAL_LEVEL:.0%}: {low:,.0f}–{high:,.0f}"


@register.filter
def prediction(row: dict[str, Any], column: Any) -> str:
    """A preflight prediction's figure (``trainer.preflight.PREDICTION_COLUMNS``) in its unit."""
    value = row.get(column.key)
    if value is None:
        return "–"
    if column.unit == "samples":
        return formatting.count(round(value), "sample")
    if column.unit == "x":
        return f"{value:.2f}×"
    if column.unit == "fraction":
        return percent(value)
    if column.unit == "seconds":
        return f"{value:,.2f} s"
    if column.unit == "versions":
        return f"{value:.2f} versions"
    return formatting.number(value)
