"""When a standard cron expression fires, without Prefect: enough to tell, before a schedule is
served, whether two of its runs would give a templated release the same name (so that every
run after the first of them is refused as already released), and, at each scheduled run,
whether its date is the latest firing (:mod:`dprelease.serve.binding`).

Five fields (minute, hour, day of month, month, day of week) of numbers, ``*``, ranges
``a-b``, steps ``*/s`` and ``a-b/s``, lists ``a,b``, month and day names (``JAN``, ``MON``),
and the macros ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``,
``@annually``. As in cron, when both day fields are restricted a day matching either fires.
Anything else is not understood (None): ``dprelease schedule`` refuses to serve it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Iterator

MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
          "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
_NAMES = {3: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
          4: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def _field(text: str, index: int) -> set[int] | None:
    low, high = _RANGES[index]
    names = _NAMES.get(index, [])
    first = 1 if index == 3 else 0

    def number(token: str) -> int:
        upper = token.upper()
        if upper in names:
            return names.index(upper) + first
        if not token.isdigit():
            raise ValueError(token)
        return int(token)

    values: set[int] = set()
    try:
        for part in text.split(","):
            body, _, step_text = part.partition("/")
            step = int(step_text) if step_text else 1
            if step < 1:
                return None
            if body == "*":
                start, end = low, high
            elif "-" in body:
                a, b = body.split("-", 1)
                start, end = number(a), number(b)
            else:
                start = number(body)
                end = high if step_text else start
            if not low <= start <= end <= high:
                return None
            values.update(range(start, end + 1, step))
    except ValueError:
        return None
    if index == 4 and 7 in values:  # Sunday is 0 or 7
        values = (values - {7}) | {0}
    return values


@dataclass(frozen=True)
class _Cron:
    minutes: list[int]
    hours: list[int]
    days: list[int]
    months: list[int]
    weekdays: list[int]
    either: bool  # both day fields restricted: a day matching either fires

    def fires_on(self, day: datetime) -> bool:
        on_day = day.day in self.days
        on_weekday = (day.weekday() + 1) % 7 in self.weekdays  # cron: Sunday is 0
        return day.month in self.months and ((on_day or on_weekday) if self.either else (on_day and on_weekday))

    def times(self, start: datetime, step: int) -> Iterator[datetime]:
        """Each firing of the day of ``start`` and of the 3660 days after it (``step`` 1) or
        before it (-1), in that order."""
        day = start.replace(hour=0, minute=0, second=0, microsecond=0)
        for _ in range(3661):
            if self.fires_on(day):
                for h in self.hours[::step]:
                    for m in self.minutes[::step]:
                        yield day.replace(hour=h, minute=m)
            day += timedelta(days=step)


def _parse(cron: str) -> _Cron | None:
    """``cron`` parsed, or None if it is not understood (see the module's docstring)."""
    text = MACROS.get(cron.strip(), cron.strip())
    fields = text.split()
    if len(fields) != 5 or not all(re.fullmatch(r"[0-9A-Za-z*,/-]+", f) for f in fields):
        return None
    parsed = [_field(f, i) for i, f in enumerate(fields)]
    if any(p is None for p in parsed):
        return None
    return _Cron(*(sorted(p) for p in parsed if p is not None), either=fields[2] != "*" and fields[4] != "*")


def firings(cron: str, after: datetime, count: int) -> list[datetime] | None:
    """The first ``count`` times after ``after`` (naive, UTC) that ``cron`` fires, or None if the
    expression is not understood (see the module's docstring). Looks ahead at most ten years."""
    parsed = _parse(cron)
    if parsed is None:
        return None
    return list(islice((at for at in parsed.times(after, 1) if at > after), count))


def latest_firing(cron: str, at: datetime) -> datetime | None:
    """The last time at or before ``at`` (naive, UTC) that ``cron`` fires, looking back at most
    ten years; None if there is none then or the expression is not understood."""
    parsed = _parse(cron)
    if parsed is None:
        return None
    return next((t for t in parsed.times(at, -1) if t <= at), None)
