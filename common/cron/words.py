"""A job's schedule in words, for operators: ``0 9 * * MON-FRI`` is "at 09:00, Monday
through Friday".

The words follow the expression's own text field by field (the grammar is
``common.cron.fields``), so what they say is what the expression says, including the
rule that a day matches either day field when both are restricted. An expression the
phrases do not cover well still comes out correct, only plainer ("at minutes 0-10 and
30").
"""

from __future__ import annotations

import re

_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_WEEKDAYS = "Sunday Monday Tuesday Wednesday Thursday Friday Saturday".split()
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_PLAIN = re.compile(r"[0-9]+(,[0-9]+)*")


def describe_schedule(cron_expr: str | None, timezone: str, fixed_rate_seconds: int | None) -> str:
    """A job's schedule in words: its cron with the zone it is read in, its fixed rate,
    or "once" for a one-shot job."""
    if cron_expr is not None:
        zone = "UTC" if timezone == "UTC" else f"{timezone} time"
        return f"{describe_cron(cron_expr)} ({zone})"
    if fixed_rate_seconds is not None:
        return f"{every_interval(fixed_rate_seconds)} (fixed rate)"
    return "once"


def every_interval(seconds: int) -> str:
    """``every 90 seconds``, ``every 10 minutes``, ``every hour``, ``every 2 days``."""
    for size, unit in ((86_400, "day"), (3_600, "hour"), (60, "minute"), (1, "second")):
        if seconds % size == 0:
            count = seconds // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds} seconds"  # pragma: no cover - 1 divides every whole number


def describe_cron(expr: str) -> str:
    """An accepted 5- or 6-field cron expression in words."""
    fields = expr.split()
    six = len(fields) == 6
    second, minute, hour, day, month, weekday = fields if six else ["0", *fields]
    fixed = _fixed_times(second, minute, hour)
    days = _days(day, weekday)
    if fixed is not None:
        when = [fixed, days or "every day"]
    else:
        when = [_time_of_day(second if six else "0", minute, hour), days]
    return ", ".join(part for part in [*when, _months(month)] if part)


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _fixed_times(second: str, minute: str, hour: str) -> str | None:
    """``at 09:00 and 17:30`` when the three fields are plain values, at most 4 times."""
    if not all(_PLAIN.fullmatch(f) for f in (second, minute, hour)):
        return None
    seconds, minutes, hours = ([int(v) for v in f.split(",")] for f in (second, minute, hour))
    if len(seconds) * len(minutes) * len(hours) > 4:
        return None
    with_seconds = any(seconds)
    times = [
        f"{h:02d}:{m:02d}" + (f":{s:02d}" if with_seconds else "")
        for h in sorted(hours)
        for m in sorted(minutes)
        for s in sorted(seconds)
    ]
    return "at " + _listed(times)


def _time_of_day(second: str, minute: str, hour: str) -> str:
    pieces = [] if second == "0" else [_unit(second, "second")]
    if minute != "*" or not pieces:
        pieces.append(_unit(minute, "minute"))
    elif pieces[-1].startswith("at "):
        pieces[-1] += " of every minute"
    if hour != "*":
        pieces.append(_hours(hour))
    elif pieces[-1].startswith("at ") and "of every" not in pieces[-1]:
        pieces[-1] += " of every hour"
    return ", ".join(pieces)


def _unit(text: str, unit: str) -> str:
    """One seconds or minutes field: ``every 5 minutes``, ``at minute 30``, ..."""
    if text in ("*", "*/1"):
        return f"every {unit}"
    if "," in text:
        return f"at {unit}s " + _listed([_range_words(i) for i in text.split(",")])
    base, _, step = text.partition("/")
    if step:
        every = f"every {step} {unit}s"
        if base == "*":
            return every
        if "-" in base:
            return f"{every} from {unit} {_range_words(base)}"
        return f"{every} from {unit} {base}"
    if "-" in base:
        return f"every {unit} from {unit} {_range_words(base)}"
    return f"at {unit} {base}"


def _range_words(item: str) -> str:
    first, dash, last = item.partition("-")
    return f"{first} through {last}" if dash else item


def _hours(text: str) -> str:
    if "," in text or text.isdigit():
        return "in hour " + text if text.isdigit() else "in hours " + _listed(text.split(","))
    base, _, step = text.partition("/")
    if step:
        start = "" if base == "*" else f" from hour {_range_words(base)}"
        return f"every {step} hours{start}"
    first, _, last = base.partition("-")
    return f"from {int(first):02d}:00 through {int(last):02d}:59"


def _days(day: str, weekday: str) -> str:
    """The day fields; when both are restricted a day matches either (cron's rule)."""
    phrases = []
    if day != "*":
        phrases.append(_month_days(day))
    if weekday != "*":
        phrases.append(_weekdays(weekday))
    if len(phrases) == 2 and not phrases[1].startswith("on "):
        phrases[1] = "on " + phrases[1]
    return " or ".join(phrases)


def _month_days(text: str) -> str:
    if text.upper() == "L":
        return "on the last day of the month"
    base, _, step = text.partition("/")
    if step:
        start = "" if base == "*" else f" from day {_range_words(base)}"
        return f"every {step} days of the month{start}"
    items = [("the last day" if i.upper() == "L" else _range_words(i)) for i in text.split(",")]
    single = len(items) == 1 and items[0].isdigit()
    return ("on day " if single else "on days ") + _listed(items) + " of the month"


def _weekdays(text: str) -> str:
    base, _, step = text.partition("/")
    if step:
        start = "Sunday" if base == "*" else _weekday(base.split("-")[0])
        return f"every {step} days of the week from {start}"
    words = []
    for item in text.split(","):
        if "#" in item:
            day, _, n = item.partition("#")
            words.append(f"the {_ORDINALS[int(n) - 1]} {_weekday(day)} of the month")
        elif "-" in item:
            first, _, last = item.partition("-")
            words.append(f"{_weekday(first)} through {_weekday(last)}")
        else:
            words.append(_weekday(item))
    ranged = len(words) == 1 and "-" in text
    return ("" if ranged else "on ") + _listed(words)


def _weekday(text: str) -> str:
    names = [w[:3].upper() for w in _WEEKDAYS]
    if text.upper() in names:
        return _WEEKDAYS[names.index(text.upper())]
    return _WEEKDAYS[int(text) % 7]


def _months(text: str) -> str:
    if text == "*":
        return ""
    base, _, step = text.partition("/")
    if step:
        start = "" if base == "*" else f" from {_month(base.split('-')[0])}"
        return f"every {step} months{start}"
    words = []
    for item in text.split(","):
        first, dash, last = item.partition("-")
        words.append(f"{_month(first)} through {_month(last)}" if dash else _month(first))
    return "in " + _listed(words)


def _month(text: str) -> str:
    names = [m[:3].upper() for m in _MONTHS]
    if text.upper() in names:
        return _MONTHS[names.index(text.upper())]
    return _MONTHS[int(text) - 1]
