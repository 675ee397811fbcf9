"""Read a YAML document with the position and source text of every node.

PyYAML's safe loader rewrites scalars (YAML 1.1 turns ``01`` into 1, ``NO`` into False and
``010`` into 8) and forgets where each value was written. Specs need both: domain values are
taken as written, and every error names its line. So we *compose* the document with the
safe loader's resolver (no constructor ever runs, so no tag can execute code), then walk the
node graph ourselves:

* keys are kept as their source text and must be plain scalars;
* a key repeated in one mapping is an error, never "last one wins" (the first is kept, so the
  rest of the document is still checked and every problem reported);
* only the core tags (str, int, float, bool, null, timestamp, seq, map) are accepted;
* anchors and aliases work, but expansion is bounded: a document that expands to more than
  ``MAX_NODES`` nodes or nests deeper than ``MAX_DEPTH`` is refused (alias bombs, recursion);
* merge keys (``<<``) are refused rather than half-supported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dprelease.errors import Problem

MAX_BYTES = 4 * 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64

_T = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_T + t for t in ("str", "int", "float", "bool", "null", "timestamp")}

Path_ = tuple[str | int, ...]


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(slots=True)
class Document:
    """A plain-Python view of a YAML document plus where each part was written."""

    file: Path
    data: Any
    marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # value node positions
    key_marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # mapping keys
    texts: dict[Path_, str] = field(default_factory=dict)  # scalar source text
    problems: list[Problem] = field(default_factory=list)  # non-fatal: the walk went on

    def problem(self, path: Path_, message: str, *, at_key: bool = False) -> Problem:
        line, col = self.position(path, at_key=at_key)
        return Problem(self.file, line, col, format_path(path), message)

    def position(self, path: Path_, *, at_key: bool = False) -> tuple[int, int]:
        if at_key and path in self.key_marks:
            return self.key_marks[path]
        # walk up to the nearest ancestor that was written
        for n in range(len(path), -1, -1):
            if path[:n] in self.marks:
                return self.marks[path[:n]]
        return (0, 0)

    def text(self, path: Path_) -> str | None:
        return self.texts.get(path)


class YamlProblem(Exception):
    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


def load_document(file: Path) -> Document:
    """Read ``file`` as one YAML document; raise :class:`YamlProblem` on any defect."""
    file = Path(file)

    def fail(message: str, line: int = 0, col: int = 0) -> YamlProblem:
        return YamlProblem(Problem(file, line, col, "", message))

    if file.exists() and not file.is_file():  # a directory, a device (/dev/zero) or a FIFO: never read
        raise fail("not a regular file")
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise fail("no such file") from None
    except OSError as exc:
        raise fail(f"cannot read the spec: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise fail(f"the spec is larger than {MAX_BYTES // (1024 * 1024)} MiB; is this the right file?")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise fail(f"the spec is not UTF-8 text (byte 0x{raw[exc.start]:02x}); save it as UTF-8", line, 1) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        what = " ".join(s for s in (exc.context, exc.problem) if s)
        raise fail(f"not valid YAML: {what}", line, col) from None
    except yaml.YAMLError as exc:
        raise fail(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise fail(f"the document nests deeper than {MAX_DEPTH} levels") from None
    if node is None:
        raise fail("the spec is empty; see configs/acs_demo.yaml for an example", 1, 1)
    doc = Document(file=file, data=None)
    doc.data = _Walker(doc).walk(node, (), 0)
    return doc


class _Walker:
    def __init__(self, doc: Document):
        self.doc = doc
        self.count = 0
        self.constructor = yaml.SafeLoader("")  # only its scalar constructors are used

    def _fail(self, node: yaml.Node, path: Path_, message: str) -> YamlProblem:
        m = node.start_mark
        return YamlProblem(Problem(self.doc.file, m.line + 1, m.column + 1, format_path(path), message))

    def _note(self, node: yaml.Node, path: Path_, message: str) -> None:
        """A problem that does not stop the walk, so later problems are reported too."""
        self.doc.problems.append(self._fail(node, path, message).problem)

    def walk(self, node: yaml.Node, path: Path_, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self._fail(node, path, f"the document expands to more than {MAX_NODES} nodes "
                             "(an alias bomb?); write it out plainly")
        if depth > MAX_DEPTH:
            raise self._fail(node, path, f"the document nests deeper than {MAX_DEPTH} levels "
                             "(a recursive alias?)")
        self.doc.marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _T + "seq":
                self._note(node, path, f"YAML tag {node.tag!r} is not allowed in a spec")
                return None
            return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag != _T + "map":
                self._note(node, path, f"YAML tag {node.tag!r} is not allowed in a spec")
                return None
            return self._mapping(node, path, depth)
        raise self._fail(node, path, "unsupported YAML node")  # pragma: no cover

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self._note(key_node, path, "mapping keys must be plain names")
                continue
            if key_node.tag == _T + "merge":
                self._note(key_node, path, "merge keys (<<) are not supported; write the keys out")
                continue
            key = key_node.value
            kpath = path + (key,)
            if key in out:
                first = self.doc.key_marks[kpath][0]
                self._note(key_node, kpath, f"key {key!r} is repeated in this mapping (first at line {first}); "
                           "keep one")
                continue
            m = key_node.start_mark
            self.doc.key_marks[kpath] = (m.line + 1, m.column + 1)
            out[key] = self.walk(value_node, kpath, depth + 1)
        return out

    def _scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        tag = node.tag
        if tag not in _SCALAR_TAGS:
            self._note(node, path, f"YAML tag {tag!r} is not allowed in a spec; write a plain value")
            return None
        self.doc.texts[path] = node.value
        try:
            match tag.removeprefix(_T):
                case "null":
                    return None
                case "bool":
                    return self.constructor.construct_yaml_bool(node)
                case "int":
                    return self.constructor.construct_yaml_int(node)
                case "float":
                    return self.constructor.construct_yaml_float(node)
                case _:  # str, and timestamps kept as the text written
                    return node.value
        except ValueError:  # e.g. an integer longer than Python converts
            self._note(node, path, f"the number {node.value[:20]}... is far too long")
            return None
