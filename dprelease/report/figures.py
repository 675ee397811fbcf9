"""The HTML budget report's figures: PNGs drawn with matplotlib's Agg backend (no display, no
script to view them), each with a text alternative that states its figures.

A pure function of the manifest and the ledger's record of the dataset (the burn-down); every
margin is at the spec's confidence (``manifest["confidence"]``). Nothing here touches data.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dprelease.accounting import decimal_text, percent_text
from dprelease.ledger import DatasetState
from dprelease.publish.manifest_reader import entry_budget, release_budgets
from dprelease.plan.review import measurement_name
from dprelease.plan.tradeoff import Curve
from dprelease.report.published import TRADEOFF_MARK, burn_down, other_runs, tradeoff_curves

ALLOCATION, BURN_DOWN, MARGIN = "#3b6ea5", "#a53b3b", "#5a9e5a"  # bar and line colours


@dataclass(frozen=True)
class Figure:
    key: str  # the image's id: fig-KEY
    title: str  # its heading
    alt: str  # its text alternative: what it shows, with its figures
    png: str  # base64


def _subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], **kwargs: Any):  # type: ignore[no-untyped-def]
    """A figure on matplotlib's Agg canvas and its axes, as ``pyplot.subplots`` makes them, without
    pyplot: its import (its backends and figure manager) is a third of the report's time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def _png(fig) -> str:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def figures(manifest: dict[str, Any], state: DatasetState | None) -> list[Figure]:
    """The budget per table, the dataset's burn-down of committed releases, each table's margin of
    error at the spec's confidence and the trade-off (:func:`dprelease.report.published.tradeoff_curves`)."""
    budgets = release_budgets(manifest)
    symbol, confidence = budgets.total.symbol, percent_text(Fraction(manifest["confidence"]))
    names = [measurement_name(t["name"], t.get("level")) for t in manifest["tables"]]
    amounts = [entry_budget(t).amount for t in manifest["tables"]]
    margins = _cell_margins(manifest, names)
    points = burn_down(manifest, state)
    curves = tradeoff_curves(manifest, Fraction(manifest["confidence"]))
    units = [_unit(t) for t in manifest["tables"]]
    panels = list(dict.fromkeys(u for c, u in zip(curves, units) if any(p.moe is not None for p in c.points)))
    return [
        Figure("allocation", f"{symbol} allocation per table",
               f"Bar chart of {symbol} per table: " + "; ".join(f"{n} {decimal_text(a)}" for n, a in zip(names, amounts))
               + f". Release total {decimal_text(budgets.total.amount)} of {decimal_text(budgets.release.amount)}.",
               _allocation_png(names, amounts, symbol, budgets.total.amount, budgets.release.amount)),
        Figure("burndown", f"Lifetime budget burn-down of {manifest['dataset']} (committed releases)",
               f"Step chart of the {budgets.cap.symbol} spent by committed releases: "
               + "; ".join(f"{p.release} {decimal_text(p.spent_after)}" for p in points)
               + f"; lifetime cap {decimal_text(budgets.cap.amount)}.",
               _burn_down_png(manifest, state)),
        Figure("moe", f"Expected margin of error per cell of each count or sum table (±MoE {confidence})",
               (f"Bar chart of each count or sum table's expected margin of error per cell at {confidence}: "
                + "; ".join(f"{n} ±{m}" for n, m in margins) + ".") if margins else
               "No table of this release has a margin of error.",
               _margin_png(margins, confidence)),
        Figure("tradeoff", f"Privacy–accuracy trade-off: the ±MoE {confidence} over {symbol}",
               f"Line charts of each table's margin of error at {confidence} over its {symbol} × 1/8 to 8, one "
               f"panel per unit ({'; '.join(panels)}), the published budget starred; the same figures are in the "
               "table below.",
               _tradeoff_png(curves, symbol, confidence, units)),
    ]


def _cell_margins(manifest: dict[str, Any], names: list[str]) -> list[tuple[str, int]]:
    """The ± per cell of each count or sum table (its measure's own margin, in persons or the summed
    column's units): a mean's, mode's or quantile's margin is in other units, not a bar beside
    these (they are listed in words, in the report's margins section)."""
    out = []
    for name, t in zip(names, manifest["tables"]):
        margin = t["margin"]
        if margin["kind"] != "cell":
            continue
        value = margin["value"]
        if value:
            out.append((name, int(value)))
    return out


def _allocation_png(names: list[str], amounts: list[Fraction], symbol: str, total: Fraction,
                    release: Fraction) -> str:
    fig, ax = _subplots(figsize=(7, 0.45 * len(names) + 1.2))
    ax.barh(names, [float(a) for a in amounts], color=ALLOCATION)  # float: display only
    ax.invert_yaxis()
    ax.set_xlabel(f"{symbol} per table (release total {decimal_text(total)} of {decimal_text(release)})")
    return _png(fig)


def _burn_down_png(manifest: dict[str, Any], state: DatasetState | None) -> str:
    """The committed releases' cumulative spend; the ledger's whole spend (with the reservations
    not committed that still count) as a dotted line when it is more."""
    budgets = release_budgets(manifest)
    points = burn_down(manifest, state)
    fig, ax = _subplots(figsize=(7, 3.2))
    xs = list(range(len(points)))
    ax.step(xs, [float(p.spent_after) for p in points], where="post", color=BURN_DOWN, marker="o",
            label="spent by committed releases")
    pending = sum((r.charge for r in other_runs(state) if r.counts_as_spent), Fraction(0))
    if pending:
        ax.axhline(float(points[-1].spent_after + pending), color=BURN_DOWN, linestyle=":",
                   label="counted as spent, with reservations not committed")
    ax.axhline(float(budgets.cap.amount), color="black", linestyle="--", label="lifetime cap")  # display
    ax.set_ylim(bottom=0)
    ax.set_xticks(xs, [p.release for p in points], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(budgets.cap.symbol)
    ax.legend(fontsize=8)
    return _png(fig)


def _margin_png(margins: list[tuple[str, int]], confidence: str) -> str:
    fig, ax = _subplots(figsize=(7, 0.45 * max(len(margins), 1) + 1.2))
    if margins:
        ax.barh([n for n, _ in margins], [m for _, m in margins], color=MARGIN)
        ax.invert_yaxis()
        ax.set_xlabel(f"expected margin of error per cell at {confidence} (persons, or value units for sums)")
    else:
        ax.text(0.5, 0.5, "no table with a margin of error", ha="center", va="center")
        ax.set_axis_off()
    return _png(fig)


def _unit(entry: dict[str, Any]) -> str:
    """What a measurement's trade-off margin is counted in (its manifest's margin record): one
    panel of the trade-off figure per unit, never persons, dollars and ranks on one axis."""
    margin = entry.get("margin") or {}
    unit, kind = margin.get("unit", "persons"), margin.get("kind", "cell")
    return {"mean": f"{unit}, a mean's", "quantile": "rows of rank (a quantile's)",
            "mode": "rows of count gap (a mode's)"}.get(kind, unit if unit == "persons" else f"{unit}, a sum's")


_LINES = tuple(zip(("o", "s", "^", "D", "v", "P", "X", "h"), ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)),
                                                              (0, (1, 2)), (0, (8, 2)))))


def _tradeoff_png(curves: list[Curve], symbol: str, confidence: str, units: list[str] | None = None) -> str:
    """One panel per unit the margins are counted in (persons, a summed column's units, ranks),
    one line per measurement: its margin over the grid (log-scaled budget, symlog margin, since a
    margin can be 0), the published budget a star. Lines differ in colour, marker and dash, and a
    line drawn over another is thinner, so that two equal curves both show."""
    from matplotlib import colormaps

    units = units if units is not None else ["± margin of error per cell"] * len(curves)
    shown = [(c, u) for c, u in zip(curves, units) if any(p.moe is not None for p in c.points)]
    panels = list(dict.fromkeys(u for _, u in shown))
    fig, axes = _subplots(max(len(panels), 1), 1, figsize=(7, 1.2 + 3.0 * max(len(panels), 1)), sharex=True,
                             squeeze=False)
    if not shown:
        axes[0][0].text(0.5, 0.5, "no table with a margin of error", ha="center", va="center")
        axes[0][0].set_axis_off()
        return _png(fig)
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 0.25, not 2⁻²
    for row, unit in enumerate(panels):
        ax = axes[row][0]
        mine = [c for c, u in shown if u == unit]
        for i, c in enumerate(mine):
            marker, dash = _LINES[i % len(_LINES)]
            xs = [float(p.budget.amount) for p in c.points if p.moe is not None]  # display only
            ys = [p.moe for p in c.points if p.moe is not None]
            ax.plot(xs, ys, marker=marker, markersize=max(6 - i, 3), linewidth=max(2.4 - 0.4 * i, 0.8), linestyle=dash,
                    color=colormaps["tab10"](i % 10), label=c.key, zorder=2 + i)
            if c.chosen is not None and c.chosen.moe is not None:
                ax.plot([float(c.chosen.budget.amount)], [c.chosen.moe], marker="*", markersize=15, linestyle="none",
                        markerfacecolor=TRADEOFF_MARK, markeredgecolor="black", zorder=20)
        ax.plot([], [], marker="*", markersize=12, linestyle="none", markerfacecolor=TRADEOFF_MARK,
                markeredgecolor="black", label=f"published {symbol}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, 1.4 * max(p.moe for c in mine for p in c.points if p.moe is not None) + 1)
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_formatter(plain)
        ax.set_ylabel(f"± {unit}, {confidence}", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1][0].set_xlabel(f"{symbol} of the table (the published one × 1/8 … 8)")
    return _png(fig)
