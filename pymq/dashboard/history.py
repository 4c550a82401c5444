"""What the dashboard's polls saw over the last hour: named series of (time, value), pure."""

from __future__ import annotations

from collections import deque


class History:
    """Named time series, each trimmed to the last ``keep_seconds``."""

    def __init__(self, keep_seconds: float = 3600.0) -> None:
        self.keep_seconds = keep_seconds
        self.series: dict[str, deque[tuple[float, float]]] = {}

    def record(self, name: str, at: float, value: float) -> None:
        points = self.series.setdefault(name, deque())
        points.append((at, value))
        while points and points[0][0] < at - self.keep_seconds:
            points.popleft()

    def points(self, name: str) -> list[tuple[float, float]]:
        return list(self.series.get(name, ()))

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self.series if n.startswith(prefix))


def sparkline(points: list[tuple[float, float]], width: int = 480, height: int = 90) -> dict[str, object]:
    """An inline-SVG polyline's ``points`` attribute and its scale for a series (oldest left)."""
    if not points:
        return {"points": "", "max": 0.0, "last": 0.0, "count": 0}
    count = len(points)
    if len(points) == 1:  # one poll so far: a flat line at its value
        points = [(points[0][0] - 1.0, points[0][1]), points[0]]
    t0, t1 = points[0][0], points[-1][0]
    peak = max(v for _, v in points)
    top = peak or 1.0
    span = (t1 - t0) or 1.0
    coords = []
    for t, v in points:
        x = (t - t0) / span * (width - 2) + 1
        y = height - 1 - v / top * (height - 2)
        coords.append(f"{x:.1f},{y:.1f}")
    return {"points": " ".join(coords), "max": peak, "last": points[-1][1], "count": count}
