"""YAML text -> plain data plus a field-path -> line map.

`load_yaml(text, source)` composes the document with PyYAML (libyaml when
available), then builds plain Python values itself so that every mapping key and
list item keeps the line it was written on. Syntax errors, several documents,
empty input, unknown tags and alias bombs all become one `TaskValidationError`
naming the line. A duplicated mapping key keeps its last value, as SkyPilot's loader
(PyYAML) does, with a warning naming the key and both lines in `Origin.warnings`
(tasks show them as notes). Nothing here knows task fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from launcher.errors import TaskValidationError
from launcher.task.fields import Origin, Path, format_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = "tag:yaml.org,2002:"
# Plain scalar types built by SafeConstructor; other scalar tags keep their text.
_TYPED_SCALARS = {_TAG + t for t in ("null", "bool", "int", "float", "str")}
_MAX_NODES = 50_000  # aliases can make a small file expand exponentially
_MAX_DEPTH = 64


@dataclass(frozen=True)
class LoadedYaml:
    data: object  # None, bool, int, float, str, list, dict[str, ...]
    origin: Origin


def load_yaml(text: str, source: str | None) -> LoadedYaml:
    """Parse one YAML document. Raises TaskValidationError (with the line) on any problem;
    several documents (a SkyPilot pipeline) are an error that says to use `jobs launch`."""
    documents = load_yaml_documents(text, source)
    first = documents[0].data
    if len(documents) == 2 and isinstance(first, dict) and set(first) <= {"name"}:
        return documents[1]  # a pipeline header (name only) and one task: that task
    if len(documents) > 1:
        second = documents[1].start_line
        raise TaskValidationError(
            f"the file holds a pipeline of {len(documents)} YAML documents (the second starts "
            f"at line {second}); a pipeline runs as managed jobs, one stage after another: use "
            "`launcher jobs launch FILE` (`--dryrun` plans every stage). `launch` runs one task.",
            line=second,
            source=source,
        )
    return documents[0]


@dataclass(frozen=True)
class LoadedDocument(LoadedYaml):
    start_line: int = 1  # 1-based line where the document starts


def load_yaml_documents(text: str, source: str | None) -> list[LoadedDocument]:
    """Parse every (non-empty) YAML document of `text`, in order, each with its own
    field -> line map (lines count from the top of the file). Raises TaskValidationError
    for syntax errors or when there is no document at all."""
    try:
        documents = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, source, text) from None
    except yaml.reader.ReaderError as exc:  # a control character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise TaskValidationError(
            f"YAML syntax error at line {line}: the character U+{ord(char):04X} is not allowed in YAML.",
            line=line,
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise TaskValidationError(f"the file is not valid YAML: {detail}", source=source) from None
    documents = [d for d in documents if d is not None]
    if not documents:
        raise TaskValidationError(
            "the task is empty; expected a mapping with fields such as 'resources' and 'run'.",
            source=source,
        )
    out = []
    for node in documents:
        builder = _Builder(source)
        data = builder.build(node, ())
        origin = Origin(source, builder.lines, builder.raw, warnings=tuple(builder.warnings))
        out.append(LoadedDocument(data, origin, node.start_mark.line + 1))
    return out


def _syntax_error(
    exc: yaml.MarkedYAMLError, source: str | None, text: str = ""
) -> TaskValidationError:
    mark = exc.problem_mark or exc.context_mark
    problem = (exc.problem or "invalid YAML").strip()
    context = ""
    if exc.context and exc.problem:
        context = f" ({exc.context.strip()}"
        if exc.context_mark is not None and (mark is None or exc.context_mark.line != mark.line):
            context += f" started at line {exc.context_mark.line + 1}"
        context += ")"
    hint = ""
    lines = text.splitlines()
    bad_line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    if "\t" in bad_line[: mark.column + 1 if mark is not None else 0] or "\\t" in problem:
        hint = " YAML indentation must use spaces, not tabs."
    elif "mapping values are not allowed" in problem:
        hint = " A value containing ': ' must be quoted, or a key is indented wrongly."
    if mark is None:
        return TaskValidationError(f"YAML syntax error: {problem}{context}.{hint}", source=source)
    line, column = mark.line + 1, mark.column + 1
    return TaskValidationError(
        f"YAML syntax error at line {line}, column {column}: {problem}{context}.{hint}",
        line=line,
        source=source,
    )


class _Builder:
    """Turns a composed node tree into plain data, recording lines per path."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.lines: dict[Path, int] = {}
        self.raw: dict[Path, str] = {}
        self.warnings: list[str] = []
        self.count = 0
        self._constructor = yaml.SafeLoader("")

    def fail(self, node: Node, path: Path, message: str) -> TaskValidationError:
        return TaskValidationError(
            message,
            field=format_path(path) or None,
            line=node.start_mark.line + 1,
            source=self.source,
        )

    def build(self, node: Node, path: Path) -> object:
        self.count += 1
        if self.count > _MAX_NODES:
            raise self.fail(
                node, path[:1], f"the YAML expands to more than {_MAX_NODES} values (alias loops?)."
            )
        if len(path) > _MAX_DEPTH:  # also stops self-referencing anchors
            raise self.fail(
                node, path[:4], f"the YAML is nested more than {_MAX_DEPTH} levels deep."
            )
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _TAG + "seq":
                raise self.fail(node, path, f"unsupported YAML tag '{node.tag}'.")
            out = []
            for index, item in enumerate(node.value):
                self.lines[path + (index,)] = item.start_mark.line + 1
                out.append(self.build(item, path + (index,)))
            return out
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        raise self.fail(node, path, "unsupported YAML node.")  # pragma: no cover

    def _scalar(self, node: ScalarNode, path: Path) -> object:
        if node.tag not in _TYPED_SCALARS:
            if node.tag.startswith(_TAG) and node.tag[len(_TAG) :] in ("timestamp", "binary"):
                return node.value  # keep dates and the like as written
            raise self.fail(node, path, f"unsupported YAML tag '{node.tag}'.")
        self.raw[path] = node.value
        try:
            return self._constructor.construct_object(node)
        except yaml.YAMLError as exc:  # pragma: no cover - resolver and constructor agree
            raise self.fail(node, path, f"cannot read value: {exc}") from None

    def _mapping(self, node: MappingNode, path: Path) -> dict[str, object]:
        # `!!set {a, b}` is a mapping with null values: read it as one.
        if node.tag not in (_TAG + "map", _TAG + "set"):
            raise self.fail(node, path, f"unsupported YAML tag '{node.tag}'.")
        own: list[tuple[Node, Node]] = []
        merged: list[tuple[Node, Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge":  # `<<: *anchor` or `<<: [*a, *b]`
                merged.extend(self._merge_pairs(value_node, path))
            else:
                own.append((key_node, value_node))
        out: dict[str, object] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in own:
            if not isinstance(key_node, ScalarNode):
                raise self.fail(
                    key_node, path, "mapping keys must be plain names, not lists or mappings."
                )
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in first_line:
                where = format_path(path + (key,))
                self.warnings.append(
                    f"Warning: duplicate key '{where}' at lines {first_line[key]} and {line}: "
                    f"the value at line {line} is used and the one at line {first_line[key]} "
                    "is ignored (SkyPilot's loader also keeps the last one); remove one of them.")
                self._forget(path + (key,))
            first_line[key] = line
            self.lines[path + (key,)] = line
            out[key] = self.build(value_node, path + (key,))
        # Merged keys never override the mapping's own keys; earlier sources win.
        for key_node, value_node in merged:
            key = str(key_node.value)
            if key in out:
                continue
            self.lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, path + (key,))
        return out

    def _forget(self, path: Path) -> None:
        """Drop the lines and raw text recorded under `path` (a value replaced by a
        duplicated key), so the later value's own are the ones kept."""
        n = len(path)
        for table in (self.lines, self.raw):
            for stale in [p for p in table if p[:n] == path]:
                del table[stale]

    def _merge_pairs(self, value: Node, path: Path, depth: int = 0) -> list[tuple[Node, Node]]:
        if depth > _MAX_DEPTH:
            raise self.fail(value, path, "merge keys '<<' refer to each other in a loop.")
        sources = value.value if isinstance(value, SequenceNode) else [value]
        pairs: list[tuple[Node, Node]] = []
        for source in sources:
            if not isinstance(source, MappingNode):
                raise self.fail(source, path, "a merge key '<<' must refer to a mapping.")
            for key_node, value_node in source.value:
                if key_node.tag == _TAG + "merge":
                    pairs.extend(self._merge_pairs(value_node, path, depth + 1))
                elif not isinstance(key_node, ScalarNode):
                    raise self.fail(key_node, path, "mapping keys must be plain names.")
                else:
                    pairs.append((key_node, value_node))
        return pairs
