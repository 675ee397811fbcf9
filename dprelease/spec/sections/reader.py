"""Typed, defensive access to a spec document's nodes, and the list of problems found.

Every section checker reads the spec through one :class:`Reader` and reports into it. A part
with the wrong shape reads as the default (the schema pass has already reported it), and a
problem at a field the schema pass already reported is dropped, so one mistake is reported once.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.accounting import NotANumber, parse_budget
from dprelease.errors import Problem
from dprelease.spec.yamlsource import Document, Path_

INT = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only; far beyond any cell limit


class Reader:
    """A document that may also have schema problems, and the semantic problems found in it."""

    __slots__ = ("doc", "problems", "skip")

    def __init__(self, doc: Document, skip: set[str]):
        self.doc = doc
        self.skip = skip  # fields the schema pass has reported
        self.problems: list[Problem] = []

    @property
    def base(self) -> Path:
        """The folder that relative paths in the spec (domain and mapping files) start from."""
        return self.doc.file.parent

    def fail(self, path: Path_, message: str, *, at_key: bool = False) -> None:
        problem = self.doc.problem(path, message, at_key=at_key)
        if problem.field not in self.skip:
            self.problems.append(problem)

    def reported(self, path: Path_) -> bool:
        """Whether the schema pass has reported the field at ``path`` (as a whole)."""
        return self.doc.problem(path, "").field in self.skip

    def get(self, path: Path_, kind: type | tuple[type, ...], default: Any = None) -> Any:
        """The node at ``path`` if it is a ``kind`` (a bool is not an int), else ``default``."""
        node: Any = self.doc.data
        for part in path:
            if isinstance(part, int) and isinstance(node, list) and part < len(node):
                node = node[part]
            elif isinstance(part, str) and isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return default
        return node if isinstance(node, kind) and not (kind is int and isinstance(node, bool)) else default

    def written(self, path: Path_) -> bool:
        """Whether the spec writes a value at ``path`` (whatever its shape)."""
        return path in self.doc.marks

    def text(self, path: Path_) -> str | None:
        """The scalar at ``path`` as written in the file."""
        return self.doc.text(path)

    def unique_name(self, at: Path_, names: dict[str, int]) -> tuple[str | None, bool]:
        """The name of the list item at ``at`` (``("tables", i)``), and whether an earlier item of
        the list already has it (reported); ``names`` (name → index) is kept up to date."""
        section, index = at
        name = self.get(at + ("name",), str)
        if name is not None and name in names:
            self.fail(at + ("name",), f"{str(section)[:-1]} name {name!r} is already used by {section}[{names[name]}]; "
                      "names must be unique")
            return name, True
        if name is not None:
            names[name] = int(index)
        return name, False

    def fraction(self, path: Path_, what: str = "ε") -> Fraction | None:
        """The exact number at ``path``, parsed from its text; None if absent or invalid (reported)."""
        node = self.get(path[:-1], dict, {})
        if path[-1] not in node:
            return None
        try:
            return parse_budget(self.doc.text(path), node[path[-1]], what=what)
        except NotANumber as exc:
            self.fail(path, str(exc))
            return None

    def texts(self, path: Path_) -> list[str] | None:
        """A list of scalars, each as written; None if any is empty (reported)."""
        items = self.get(path, list)
        if items is None:
            return None
        out = []
        for i, item in enumerate(items):
            text = self.doc.text(path + (i,))
            if item is None or text is None or text == "":
                self.fail(path + (i,), "an empty value; write the value out (quote it if needed)")
                return None
            out.append(text)
        return out

    def int_list(self, path: Path_) -> list[int] | None:
        """A list of whole numbers, read from their text; None if any is not one (reported)."""
        items = self.get(path, list)
        if items is None:
            return None
        out = []
        for i, _ in enumerate(items):
            text = (self.doc.text(path + (i,)) or "").strip()
            if not INT.fullmatch(text):
                self.fail(path + (i,), f"{text!r} is not a whole number")
                return None
            out.append(int(text))
        return out

    def distinct(self, path: Path_, values: list[str], what: str) -> bool:
        """Whether no value is listed twice (the first repeat reported)."""
        seen: set[str] = set()
        for v in values:
            if v in seen:
                self.fail(path, f"{what} {v!r} is listed twice; each must appear once")
                return False
            seen.add(v)
        return True
