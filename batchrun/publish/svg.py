"""Hand-written SVG plots for the static site: interval bars, stacked coverage bars, heatmaps.

Three small plot types do not justify matplotlib (tens of MB, a slow import, and an image per
plot to keep in step with the tables): inline SVG is a few hundred bytes per plot, scales with
the page, carries its numbers as text and <title> tooltips, and needs nothing at view time.
Every text that comes from data is escaped here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

# Okabe-Ito colours (distinguishable with colour-vision deficiencies) for categories.
COVERAGE_COLOURS = {"scored": "#009E73", "out_of_context": "#999999", "failed": "#D55E00", "accepted": "#CC79A7",
                    "pending": "#E69F00"}
COVERAGE_LABELS = {"scored": "scored", "out_of_context": "out of context", "failed": "failed (refusal, empty)",
                   "accepted": "accepted infrastructure failure (not the model's; not protocol)",
                   "pending": "open (pending, judging, waiting, blocked)"}
# Sequential scale for scores 0-100 (viridis stops), diverging scale for differences.
_SEQUENTIAL = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)), (1.0, (253, 231, 37)))
_DIVERGING = ((0.0, (178, 24, 43)), (0.5, (247, 247, 247)), (1.0, (33, 102, 172)))


def e(value: object) -> str:
    return escape(str(value), quote=True)


def _lerp(stops: Sequence[tuple[float, tuple[int, int, int]]], t: float) -> tuple[int, int, int]:
    t = min(max(t, 0.0), 1.0)
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            return tuple(round(a + (b - a) * f) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return stops[-1][1]


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb


def score_colour(value: float | None) -> str:
    """Colour of a 0-100 score."""
    return "#eeeeee" if value is None else _hex(_lerp(_SEQUENTIAL, value / 100))


def diff_colour(value: float | None, span: float = 20.0) -> str:
    """Colour of a difference in points: red below 0, blue above, white at 0, saturated at +-span."""
    return "#eeeeee" if value is None else _hex(_lerp(_DIVERGING, 0.5 + value / (2 * span)))


def text_colour(background: str) -> str:
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def interval_bar(first: tuple[float | None, float | None, float | None], second: tuple[float | None, float | None, float | None] | None = None,
                 *, label: str = "", width: int = 240) -> str:
    """A 0-100 axis with an estimate (dot) and its interval (bar); below it, optionally, a
    second estimate (hollow diamond) and interval (thinner bar): All-tasks and Scored."""
    pad = 6
    span = width - 2 * pad
    height = 26 if second else 16

    def x(v: float) -> float:
        return pad + span * min(max(v, 0.0), 100.0) / 100

    parts = [f'<svg class="ivbar" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{e(label)}"><title>{e(label)}</title>']
    for tick in (0, 25, 50, 75, 100):
        parts.append(f'<line x1="{x(tick):.1f}" y1="2" x2="{x(tick):.1f}" y2="{height - 2}" class="tick"/>')
    est, low, high = first
    y1 = 8
    parts.append(f'<line x1="{pad}" y1="{y1}" x2="{width - pad}" y2="{y1}" class="axis"/>')
    if low is not None and high is not None:
        parts.append(f'<rect x="{x(low):.1f}" y="{y1 - 4}" width="{max(x(high) - x(low), 1.5):.1f}" height="8" rx="3" class="ci"/>')
    if est is not None:
        parts.append(f'<circle cx="{x(est):.1f}" cy="{y1}" r="4.5" class="est"/>')
    if second:
        est2, low2, high2 = second
        y2 = 19
        if low2 is not None and high2 is not None:
            parts.append(f'<rect x="{x(low2):.1f}" y="{y2 - 2.5}" width="{max(x(high2) - x(low2), 1.5):.1f}" height="5" rx="2" class="ci2"/>')
        if est2 is not None:
            cx = x(est2)
            parts.append(f'<path d="M{cx:.1f},{y2 - 5} L{cx + 4.5:.1f},{y2} L{cx:.1f},{y2 + 5} L{cx - 4.5:.1f},{y2} Z" class="second"/>')
    parts.append("</svg>")
    return "".join(parts)


def axis(*, width: int = 240) -> str:
    """The 0-100 scale above a column of interval bars."""
    pad = 6
    span = width - 2 * pad
    labels = "".join(f'<text x="{pad + span * t / 100:.1f}" y="11" class="axislabel">{t}</text>' for t in (0, 25, 50, 75, 100))
    return f'<svg class="ivbar axis" viewBox="0 0 {width} 14" width="{width}" height="14" aria-hidden="true">{labels}</svg>'


def coverage_bar(counts: dict[str, int], n_tasks: int, *, width: int = 160, height: int = 16) -> str:
    """Stacked bar of a route's cells: scored, out of context, failed, open."""
    total = max(n_tasks, sum(counts.get(k, 0) for k in COVERAGE_COLOURS), 1)
    label = ", ".join(f"{COVERAGE_LABELS[k]} {counts.get(k, 0)}" for k in COVERAGE_COLOURS) + f" of {n_tasks} tasks"
    parts = [f'<svg class="covbar" viewBox="0 0 {width} {height}" width="{width}" height="{height}" preserveAspectRatio="none" role="img" '
             f'aria-label="{e(label)}"><title>{e(label)}</title>']
    x = 0.0
    for key, colour in COVERAGE_COLOURS.items():
        w = width * counts.get(key, 0) / total
        if w > 0:
            parts.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{colour}"><title>{e(COVERAGE_LABELS[key])}: '
                         f'{counts.get(key, 0)}</title></rect>')
        x += w
    parts.append("</svg>")
    return "".join(parts)


def coverage_legend() -> str:
    return "".join(f'<span class="key"><span class="swatch" style="background:{c}"></span>{e(COVERAGE_LABELS[k])}</span>'
                   for k, c in COVERAGE_COLOURS.items())


CHAR_W = 6.3  # average width of an 11px sans-serif character, for laying out labels


def heatmap(rows: Sequence[str], cols: Sequence[str], values: Sequence[Sequence[float | None]], *,
            tooltips: Sequence[Sequence[str]] | None = None, colour: Callable[[float | None], str] = score_colour, cell_w: int = 52, cell_h: int = 26,
            label: str = "", marks: Sequence[Sequence[str]] | None = None, row_notes: Sequence[str] | None = None,
            max_label: int = 32, details_id: str | None = None) -> str:
    """A grid of values with row and (slanted) column labels; each cell shows its value and a
    tooltip. `marks` adds a short suffix to a cell's text (a significance mark); `row_notes` a
    text right of each row. Label space is sized from the labels (long ones are cut, with the
    full text in a tooltip).

    A tooltip shows only under a mouse: each cell with a value is also focusable (Tab reaches it,
    and it is outlined when focused) with the tooltip as its accessible name, and `details_id`
    names the table that holds the same figures (aria-details) for touch screens and anyone."""
    def cut(t: str) -> str:
        return t if len(t) <= max_label else t[:max_label - 1] + "…"

    row_label_w = int(min(max_label, max((len(r) for r in rows), default=4)) * CHAR_W + 14)
    longest_col = min(max_label, max((len(c) for c in cols), default=4)) * CHAR_W
    col_label_h = int(longest_col * 0.643 + 16)
    notes_w = int(max((len(n) for n in row_notes), default=0) * CHAR_W + 12) if row_notes else 0
    grid_w = cell_w * len(cols)
    width = row_label_w + grid_w + max(notes_w, int(longest_col * 0.766 - cell_w / 2 + 12))
    height = col_label_h + cell_h * len(rows) + 4
    details = f' aria-details="{e(details_id)}"' if details_id else ""
    parts = [f'<svg class="heatmap" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="group" '
             f'aria-label="{e(label)}"{details}><title>{e(label)}</title>']
    for j, c in enumerate(cols):
        cx = row_label_w + cell_w * j + cell_w / 2
        parts.append(f'<text class="collabel" transform="translate({cx - 2:.1f},{col_label_h - 6}) rotate(-40)">{e(cut(c))}'
                     f'<title>{e(c)}</title></text>')
    for i, r in enumerate(rows):
        y = col_label_h + cell_h * i
        parts.append(f'<text class="rowlabel" x="{row_label_w - 6}" y="{y + cell_h / 2 + 4:.1f}">{e(cut(r))}<title>{e(r)}</title></text>')
        for j, v in enumerate(values[i]):
            x = row_label_w + cell_w * j
            bg = colour(v)
            tip = tooltips[i][j] if tooltips else f"{r} / {cols[j]}: {fmt(v)}"
            mark = marks[i][j] if marks else ""
            text = e(fmt(v) + mark) if v is not None else ""
            focus = f' class="hcell" tabindex="0" role="img" aria-label="{e(tip)}"' if v is not None else ""
            parts.append(f'<g{focus}><title>{e(tip)}</title><rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{bg}"/>'
                         f'<text x="{x + (cell_w - 2) / 2:.1f}" y="{y + cell_h / 2 + 3:.1f}" class="cell" '
                         f'style="fill:{text_colour(bg)}">{text}</text></g>')
        if row_notes:
            parts.append(f'<text class="rownote" x="{row_label_w + grid_w + 6}" y="{y + cell_h / 2 + 4:.1f}">{e(row_notes[i])}</text>')
    parts.append("</svg>")
    return "".join(parts)
