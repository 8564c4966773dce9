"""Small charts drawn on the server as inline SVG: no script, no asset from elsewhere.

Colours come from classes the console's stylesheet sets, so the pages need no inline
style (the Content-Security-Policy allows none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH = 600
HEIGHT = 120
TOP = 14  # room for the scale label
BOTTOM = HEIGHT - 14  # room for the first and last labels below


@dataclass(frozen=True)
class Bar:
    """One minute's bar: its label and the two stacked counts."""

    label: str
    good: int
    bad: int


def _svg(body: str, title: str, height: int = HEIGHT) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>{body}</svg>'
    )


def _ends(labels: Sequence[str]) -> str:
    """The first and last labels under the chart: the span it covers."""
    if not labels:
        return ""
    return (
        f'<text class="scale" x="2" y="{HEIGHT - 2}">{escape(labels[0])}</text>'
        f'<text class="scale" x="{WIDTH - 2}" y="{HEIGHT - 2}" text-anchor="end">'
        f"{escape(labels[-1])}</text>"
    )


def bar_chart(
    bars: Sequence[Bar], title: str, good: str = "succeeded", bad: str = "failed"
) -> Markup:
    """Stacked bars, ``good`` below ``bad``, scaled to the tallest; each with a tooltip."""
    top = max([b.good + b.bad for b in bars] + [1])
    slot = WIDTH / max(len(bars), 1)
    scale = (BOTTOM - TOP) / top
    parts = [f'<text class="scale" x="2" y="10">{top}</text>', _ends([b.label for b in bars])]
    for i, bar in enumerate(bars):
        x = i * slot + 1
        ok_h, bad_h = bar.good * scale, bar.bad * scale
        tip = escape(f"{bar.label}: {bar.good} {good}, {bar.bad} {bad}")
        parts.append(
            f"<g><title>{tip}</title>"
            f'<rect class="good" x="{x:.1f}" y="{BOTTOM - ok_h:.1f}" width="{slot - 2:.1f}" '
            f'height="{ok_h:.1f}"/>'
            f'<rect class="bad" x="{x:.1f}" y="{BOTTOM - ok_h - bad_h:.1f}" '
            f'width="{slot - 2:.1f}" height="{bad_h:.1f}"/>'
            f'<rect class="hit" x="{x:.1f}" y="0" width="{slot - 2:.1f}" height="{BOTTOM}"/></g>'
        )
    return _svg("".join(parts), title)


def line_chart(
    points: Sequence[tuple[str, float | None]], title: str, shown: Callable[[float], str]
) -> Markup:
    """A line through the values (a gap where a value is None), scaled to the largest;
    ``shown`` writes a value for the scale and the tooltips."""
    values = [v for _, v in points if v is not None]
    top = max([*values, 0.001])
    step = (WIDTH - 8) / max(len(points) - 1, 1)
    scale = (BOTTOM - TOP) / top
    parts = [
        f'<text class="scale" x="2" y="10">{escape(shown(top))}</text>',
        _ends([label for label, _ in points]),
    ]
    run: list[str] = []
    for i, (label, value) in enumerate(points):
        if value is None:
            parts.append(_polyline(run))
            run = []
            continue
        x, y = 4 + i * step, BOTTOM - value * scale
        run.append(f"{x:.1f},{y:.1f}")
        tip = escape(f"{label}: {shown(value)}")
        parts.append(
            f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{tip}</title></circle>'
        )
    parts.append(_polyline(run))
    return _svg("".join(parts), title)


def _polyline(points: list[str]) -> str:
    return f'<polyline class="line" points="{" ".join(points)}"/>' if len(points) > 1 else ""


@dataclass(frozen=True)
class Mark:
    """One execution on a timeline: when, its status (a CSS class) and its tooltip."""

    at_ms: int
    status: str
    tip: str


def timeline(marks: Sequence[Mark], title: str) -> Markup:
    """Executions as dots along their trigger times, oldest left, coloured by status."""
    if not marks:
        return Markup("")
    first, last = min(m.at_ms for m in marks), max(m.at_ms for m in marks)
    span = max(last - first, 1)
    parts = ['<line class="axis" x1="8" y1="20" x2="592" y2="20"/>']
    for mark in marks:
        x = 8 + (mark.at_ms - first) * 584 / span
        parts.append(
            f'<circle class="st-{escape(mark.status.lower())}" cx="{x:.1f}" cy="20" r="6">'
            f"<title>{escape(mark.tip)}</title></circle>"
        )
    return _svg("".join(parts), title, height=40)
