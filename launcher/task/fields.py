"""Field paths, line lookup and typed field readers for task validation.

Everything here raises `TaskValidationError` with the dotted field path and,
when the task came from YAML, the line the field is on. Values reaching these
helpers are plain Python data (None, bool, int, float, str, list, dict), as
produced by `launcher.task.yaml_loader` or passed to `Task.from_dict`.

Import cost matters (`launcher gpus` parses accelerator strings): stdlib only.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from launcher.errors import TaskValidationError

# One step of a field path: a mapping key or a list index.
PathPart = str | int
Path = tuple[PathPart, ...]

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

UNSUPPORTED_NOTE = "is a SkyPilot feature launcher doesn't support yet"


def format_path(path: Path) -> str:
    """`("resources", "any_of", 1, "accelerators")` -> `resources.any_of[1].accelerators`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Origin:
    """Where a task's values came from: the source name and a path -> line map.

    `lines` maps a field path to the 1-based line of its key (or of the list item);
    it is empty for tasks built from a dict. `raw` maps scalar paths to their YAML
    text, so `envs: {V: 1.10}` keeps "1.10" instead of the float 1.1.
    """

    source: str | None = None
    lines: Mapping[Path, int] = field(default_factory=dict)
    raw: Mapping[Path, str] = field(default_factory=dict)
    # field paths whose value was replaced later (e.g. by `--gpus`) -> where it came from
    overrides: Mapping[Path, str] = field(default_factory=dict)
    # what the YAML loader let pass but the user should read (a duplicated key), as notes
    warnings: tuple[str, ...] = ()

    def overridden_by(self, path: Path) -> str | None:
        """Where `path`'s value came from if it (or an ancestor) was overridden, else None."""
        for end in range(len(path), 0, -1):
            by = self.overrides.get(path[:end])
            if by is not None:
                return by
        return None

    def line(self, path: Path) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one (None for a value
        given by an override: its YAML line would point at the replaced value)."""
        if self.overrides and self.overridden_by(path) is not None:
            return None
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def with_overrides(self, paths: Iterable[Path], by: str) -> Origin:
        """This origin with `paths` marked as given by `by` (e.g. "command line")."""
        return replace(self, overrides={**self.overrides, **dict.fromkeys(paths, by)})

    def error(self, path: Path, message: str) -> TaskValidationError:
        """A TaskValidationError for `path` (returned, for the caller to raise)."""
        by = self.overridden_by(path) if self.overrides else None
        return TaskValidationError(
            message,
            field=format_path(path) or None,
            line=self.line(path),
            source=self.source if by is None else by,
        )


def describe(value: object) -> str:
    """A short human description of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, set | frozenset):
        return "a set"
    return f"a {type(value).__name__}"


def close_matches(word: str, choices: Iterable[str], limit: int = 3) -> list[str]:
    """Choices that look like `word` (for "did you mean ...?"), best first."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return [lowered[word.lower()]]
    import difflib  # only on the error path

    return difflib.get_close_matches(word, choices, n=limit, cutoff=0.6)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` — did you mean 'x'?` or an empty string when nothing is close."""
    matches = close_matches(word, choices)
    if not matches:
        return ""
    return " — did you mean " + " or ".join(f"'{m}'" for m in matches) + "?"


def check_keys(
    mapping: Mapping[str, object],
    path: Path,
    origin: Origin,
    allowed: Collection[str],
    *,
    unsupported: Collection[str] = (),
    elsewhere: Mapping[str, str] | None = None,
) -> None:
    """Reject keys of `mapping` not in `allowed`.

    `unsupported` keys are real SkyPilot fields we do not implement (their error
    says so); `elsewhere` maps a key to the path where it belongs instead.
    """
    for key in mapping:
        if key in allowed:
            continue
        where = path + (key,)
        if key in unsupported:
            raise origin.error(where, f"'{key}' {UNSUPPORTED_NOTE}.")
        if key.startswith("_"):
            raise origin.error(where, f"'{key}' is an internal SkyPilot field, not a task field.")
        if elsewhere and key in elsewhere:
            raise origin.error(
                where, f"'{key}' is not allowed here; it belongs under '{elsewhere[key]}'."
            )
        suggestion = did_you_mean(key, allowed)
        if not suggestion and elsewhere:
            homes = [elsewhere[m] for m in close_matches(key, elsewhere, limit=1)]
            suggestion = f" — did you mean '{homes[0]}'?" if homes else ""
        place = f" in '{format_path(path)}'" if path else ""
        allowed_list = ", ".join(sorted(allowed))
        raise origin.error(
            where,
            f"unknown field '{key}'{place}{suggestion}"
            + ("" if suggestion else f" (allowed: {allowed_list})."),
        )


# ---------------------------------------------------------------- typed readers


def expect_mapping(value: object, path: Path, origin: Origin, what: str = "a mapping") -> dict:
    if not isinstance(value, Mapping):
        raise origin.error(path, f"expected {what}, got {describe(value)}.")
    for key in value:
        if not isinstance(key, str):
            raise origin.error(path, f"keys must be strings, got {describe(key)}.")
    return dict(value)


def expect_list(value: object, path: Path, origin: Origin, what: str = "a list") -> list:
    if not isinstance(value, list | tuple):
        raise origin.error(path, f"expected {what}, got {describe(value)}.")
    return list(value)


def expect_str(value: object, path: Path, origin: Origin, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise origin.error(path, f"expected a string, got {describe(value)}.")
    if not allow_empty and not value.strip():
        raise origin.error(path, "must not be empty.")
    return value


_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n"})


def expect_bool(value: object, path: Path, origin: Origin) -> bool:
    if not isinstance(value, bool):
        looks_boolean = isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS
        hint = " (quoted, so YAML reads it as text)" if looks_boolean else ""
        raise origin.error(path, f"must be true or false, got {describe(value)}{hint}.")
    return value


def expect_int(
    value: object,
    path: Path,
    origin: Origin,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise origin.error(path, f"expected a whole number, got {describe(value)}.")
    if minimum is not None and value < minimum:
        raise origin.error(path, f"must be at least {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise origin.error(path, f"must be at most {maximum}, got {value}.")
    return value


def expect_positive_number(value: object, path: Path, origin: Origin) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise origin.error(path, f"expected a positive number, got {describe(value)}.")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise origin.error(path, f"must be a positive number, got {value!r}.")
    return number


def scalar_text(value: object, path: Path, origin: Origin) -> str | None:
    """A scalar as text: YAML's own spelling when known, else `str()`; null -> None.

    Raises for mappings and lists. Booleans from a dict become "true"/"false".
    """
    if value is None:
        return None
    raw = origin.raw.get(path)
    if raw is not None and not isinstance(value, str):
        return raw
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise origin.error(path, f"expected a text value, got {describe(value)}.")


def string_map(
    value: object, path: Path, origin: Origin, *, env_names: bool = False, allow_null: bool = False
) -> dict[str, str | None]:
    """A mapping of names to scalar text (envs, secrets, labels). Null values only if
    `allow_null`; with `env_names` the keys must be valid environment variable names."""
    if value is None:
        return {}
    mapping = expect_mapping(value, path, origin)
    out: dict[str, str | None] = {}
    for key, item in mapping.items():
        where = path + (key,)
        if env_names and not ENV_NAME_RE.match(key):
            raise origin.error(
                where,
                f"'{key}' is not a valid environment variable name "
                "(letters, digits and '_', not starting with a digit).",
            )
        text = scalar_text(item, where, origin)
        if text is None and not allow_null:
            raise origin.error(where, "must have a value, got null.")
        out[key] = text
    return out


_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object, path: Path, origin: Origin, *, unit: str, example: str) -> float:
    """'90m', '36h', '2d', '1d12h', '1.5h' -> a positive amount of `unit` ('m' or 'h').

    A unit is required in the text; `unit` is only what the result is measured in.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise origin.error(path, f"expected a duration such as '{example}', got {describe(value)}.")
    if not isinstance(value, str):
        raise origin.error(
            path, f"needs a unit: s, m, h, d or w (e.g. '{example}'), got the number {value!r}."
        )
    text = value.strip()
    pos, total = 0, 0.0
    while pos < len(text):
        match = _DURATION_RE.match(text, pos)
        if match is None:
            raise origin.error(
                path,
                f"'{value}' is not a duration; use a number with a unit s, m, h, d or w, "
                f"e.g. '{example}', '90m', '2d' or '1d12h'.",
            )
        factor = _UNIT_SECONDS[match.group(2).lower()] / _UNIT_SECONDS[unit]
        total += float(match.group(1)) * factor
        pos = match.end()
    if pos == 0 or total <= 0:
        raise origin.error(path, f"must be a positive duration such as '{example}', got '{value}'.")
    return total


# ------------------------------------------------------------ accelerator names


def canonical_accelerator_name(
    name: str, known_names: Collection[str], aliases: Mapping[str, str] | None = None
) -> str | None:
    """The spelling in `known_names` of accelerator `name`: matching ignores case, and
    then (when that leaves exactly one) '-', '_' and spaces; failing that, an entry of
    `aliases` (other name -> catalog name, e.g. SkyPilot's 'A100-40GB' -> 'A100')
    matched the same way. None when unknown."""
    found = _match_name(name, known_names)
    if found is None and aliases:
        alias = _match_name(name, aliases)
        if alias is not None:
            found = _match_name(aliases[alias], known_names)
    return found


def _match_name(name: str, known_names: Collection[str]) -> str | None:
    lowered = name.lower()
    folded_name = _fold(name)
    folded: list[str] = []
    for known in known_names:
        if known.lower() == lowered:
            return known
        if _fold(known) == folded_name:
            folded.append(known)
    return folded[0] if len(folded) == 1 else None


def _fold(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).upper()


_VENDOR_RE = re.compile(r"^(?:nvidia|amd|tesla|geforce|intel|google)[\s_\-]*", re.IGNORECASE)
_MEMORY_RE = re.compile(r"[\s_\-]*(\d+)\s*G(?:I?B)?$", re.IGNORECASE)


def accelerator_suggestions(name: str, known_names: Collection[str]) -> list[str]:
    """Up to three known names `name` probably means, best first: the name without a
    vendor prefix ('nvidia-h100' -> H100) or memory suffix ('H100-80GB' -> H100,
    'A100-40GB' -> A100), then look-alikes by similarity."""
    import difflib

    found: list[str] = []
    stripped = _VENDOR_RE.sub("", name.strip())
    for guess in (stripped, _MEMORY_RE.sub("", stripped)):
        hit = canonical_accelerator_name(guess, known_names) if guess else None
        if hit is not None and hit not in found:
            found.append(hit)
    # Fold look-alike characters (O/0, I/l/1) before comparing: 'H10O' is 'H100'.
    table = str.maketrans({"O": "0", "I": "1", "L": "1"})
    probe = _fold(stripped or name).translate(table)
    scored = []
    for known in known_names:
        ratio = difflib.SequenceMatcher(None, probe, _fold(known).translate(table)).ratio()
        bonus = 0.1 if known[:1].upper() == probe[:1] else 0.0
        scored.append((ratio + bonus, known))
    scored.sort(key=lambda s: (-s[0], s[1]))
    close = [known for score, known in scored if score >= 0.8]
    if not close and not found:
        close = [known for score, known in scored if score >= 0.6]
    found.extend(k for k in close if k not in found)
    return found[:3]


def unknown_accelerator_message(name: str, known_names: Collection[str]) -> str:
    """"unknown accelerator 'X' — did you mean ...? (`launcher gpus` lists the known names).
    SkyPilot's TPU names ('tpu-v4-8', 'tpu-v5litepod-8') get a plain "not supported yet"."""
    if name.strip().lower().startswith("tpu-"):
        tpus = sorted(k for k in known_names if k.lower().startswith("tpu-"))
        close = accelerator_suggestions(name, tpus)
        hint = f" — did you mean {', '.join(close)}?" if close else ""
        return (
            f"unknown TPU '{name}'{hint}: the GCP catalog rows have no such TPU VM "
            "(TPU VMs are planned and priced, not launched; `launcher gpus` lists them)."
        )
    close = accelerator_suggestions(name, known_names)
    hint = f" — did you mean {', '.join(close)}?" if close else ""
    return f"unknown accelerator '{name}'{hint} (`launcher gpus` lists the known names)."


def node_path_problem(target: str) -> str | None:
    """Why `target` is not a valid node path (a file_mounts target), or None.

    Node paths are absolute (`/data`) or relative to the node's home (`data`, `~/data`,
    `~`); a relative one must stay inside the home once `..` parts are resolved.
    """
    if "\0" in target:
        return "the remote path contains a NUL character."
    if target.startswith("~") and target != "~" and not target.startswith("~/"):
        return (f"remote path '{target}': '~user' paths are not supported; write an absolute "
                "path or one relative to the node's home (~/…).")
    if target.startswith("/"):
        return None
    rel = target[2:] if target.startswith("~/") else ("" if target == "~" else target)
    norm = posixpath.normpath(rel) if rel else "."
    if norm == ".." or norm.startswith("../"):
        return (f"remote path '{target}' climbs out of the node's home; write an absolute "
                "path (/…) or one that stays under the home (~/…).")
    return None
