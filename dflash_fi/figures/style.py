"""The look every figure shares: colours, one line style per series, and legends kept off the data."""

from __future__ import annotations

COLORS = {"accepted": "#4c9a2a", "refused": "#c0392b", "none": "#5b1010", "bar": "#4c72b0"}
# Series colours leave out the green and red that mean "non-causal" and "causal" reference curves.
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
COINCIDE_BELOW = 0.01  # acceptance shares this close at every position draw as one line: the legend says so


def pyplot():
    """matplotlib.pyplot, set up as every figure here wants it (SVG text kept as text)."""
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "axes.spines.top": False,
                         "axes.spines.right": False})
    return plt


def series_styles(count: int) -> list[dict]:
    """Keyword arguments for `Axes.plot`, one dict per series, no two with the same (marker, linestyle).

    Earlier series are drawn wider and with larger markers (the first one's hollow), later ones narrower on
    top, so a series lying exactly on an earlier one still shows as a thin line inside a wider one and a small
    marker inside a larger one."""
    styles = []
    for i in range(count):
        # Marker and line style both change from one series to the next; the shift after each full round
        # of markers keeps all len(MARKERS) * len(LINESTYLES) pairs distinct.
        marker, linestyle = MARKERS[i % len(MARKERS)], LINESTYLES[(i + i // len(MARKERS)) % len(LINESTYLES)]
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        styles.append({"marker": marker, "linestyle": linestyle, "color": color, "zorder": 2 + i,
                       "linewidth": max(0.9, 3.6 - 0.5 * i), "markersize": max(4.0, 11.0 - 1.3 * i),
                       "markerfacecolor": "none" if i == 0 else color, "markeredgewidth": 1.8 if i == 0 else 0.7,
                       "markeredgecolor": color if i == 0 else "white"})  # white rims part stacked markers
    return styles


def max_difference(a: list[float], b: list[float]) -> float:
    """The largest absolute difference between two series, over the positions both have."""
    return max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))


def nearest_earlier(series: dict[str, list[float]], below: float = COINCIDE_BELOW) -> dict[str, tuple[str, float]]:
    """For each series that stays within `below` of an earlier one at every position: the closest such earlier
    series and the max difference between the two."""
    names, near = list(series), {}
    for i, name in enumerate(names):
        differences = [(max_difference(series[name], series[earlier]), earlier) for earlier in names[:i]]
        difference, earlier = min(differences, default=(float("inf"), None))
        if difference < below:
            near[name] = (earlier, difference)
    return near


def figure_legend(fig, handles, labels, ncol: int | None = None, title: str | None = None):
    """One legend for the whole figure, below every panel: constrained layout makes room for it, and the
    figure grows by the legend's height so that the panels keep theirs."""
    ncol = ncol or min(len(labels), 3)
    legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8, title=title,
                        title_fontsize=8, frameon=False)
    fig.set_figheight(fig.get_figheight() + legend.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi)
    return legend


def short_run_label(run) -> str:
    """A run's label, short enough for an axis."""
    from dflash_fi.engine.identity import label

    return label(run).replace(" FLASHINFER draft", "").replace(" draft", "")
