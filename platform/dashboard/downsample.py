"""Server-side down-sampling of long series for charts.

A plain stride or a bucket mean hides spikes: a single diverging step disappears into its
neighbours. ``minmax`` keeps, for every bucket, the point with the smallest and the point with the
largest value (in x order), so the envelope a researcher looks for survives at any zoom level while
the payload stays bounded.
"""

from __future__ import annotations

from collections.abc import Sequence


def minmax(xs: Sequence[float], ys: Sequence[float | None],
           max_points: int) -> tuple[list[float], list[float | None]]:
    """Down-sample (xs, ys) to at most ``max_points`` points keeping each bucket's min and max.

    Points with y None (a metric the step did not record) are dropped inside buckets so a gap
    never masks a spike. Series already short enough are returned unchanged.
    """
    n = len(xs)
    if n <= max_points or max_points < 4:
        return list(xs), list(ys)
    buckets = max_points // 2
    out_x: list[float] = []
    out_y: list[float | None] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = (b + 1) * n // buckets
        idx = [i for i in range(lo, hi) if ys[i] is not None]
        if not idx:
            continue
        i_min = min(idx, key=lambda i: ys[i])  # type: ignore[arg-type,return-value]
        i_max = max(idx, key=lambda i: ys[i])  # type: ignore[arg-type,return-value]
        for i in sorted({i_min, i_max}):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y


def bucket_mean(xs: Sequence[float], ys: Sequence[float | None],
                max_points: int) -> tuple[list[float], list[float | None]]:
    """Mean per bucket, for stacked bars where min/max of one layer would break the stack."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    out_x: list[float] = []
    out_y: list[float | None] = []
    for b in range(max_points):
        lo = b * n // max_points
        hi = (b + 1) * n // max_points
        vals = [y for y in ys[lo:hi] if y is not None]
        out_x.append(xs[(lo + hi - 1) // 2])
        out_y.append(sum(vals) / len(vals) if vals else None)
    return out_x, out_y
