"""Pass 1 of loading a spec: the JSON Schema shipped in this package (the contract), and its
errors explained in the spec's own terms (file:line, field, fix)."""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from dprelease.accounting import NotANumber, parse_budget
from dprelease.errors import Problem
from dprelease.spec.yamlsource import Document, Path_


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) that every spec must satisfy."""
    return json.loads(resources.files("dprelease.spec").joinpath("schema.json").read_text("utf-8"))


def schema_problems(doc: Document) -> list[Problem]:
    validator = jsonschema.Draft202012Validator(schema())
    problems: list[Problem] = []
    for error in validator.iter_errors(doc.data):
        problems += _explain(doc, error)
    return problems


def _explain(doc: Document, error: jsonschema.ValidationError) -> list[Problem]:
    path: Path_ = tuple(error.absolute_path)
    if "propertyNames" in error.schema_path and isinstance(error.instance, str):
        path += (error.instance,)  # a bad key: point at the key itself
        return [doc.problem(path, f"{error.instance!r} is not a column name: use letters, digits and '_', "
                            "starting with a letter or '_'", at_key=True)]
    if error.validator == "oneOf" and isinstance(error.instance, dict) and error.context:
        # a mapping where a choice allows one (privacy.unit): explain the mapping branch's errors
        objects = {i for i, b in enumerate(error.schema["oneOf"]) if b.get("type") == "object"}
        if objects:  # the branch whose keys the mapping uses most is the one meant
            meant = max(objects, key=lambda i: len(set(error.instance) & set(error.schema["oneOf"][i]["properties"])))
            branch = [e for e in error.context if e.relative_schema_path and e.relative_schema_path[0] == meant]
            if branch:
                return [p for e in branch for p in _explain(doc, e)]
    match error.validator:
        case "additionalProperties" if isinstance(error.instance, dict):
            known = sorted(error.schema.get("properties", {}))
            out = []
            for key in error.instance:
                if key not in known:
                    hint = difflib.get_close_matches(key, known, n=1)
                    fix = f"did you mean {hint[0]!r}?" if hint else f"expected one of: {', '.join(known)}"
                    out.append(doc.problem(path + (key,), f"unknown key {key!r}; {fix}", at_key=True))
            return out
        case "required":
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            return [doc.problem(path, f"missing required key {missing!r}")]
        case "pattern" if error.schema.get("pattern", "").startswith("^[a-z0-9]"):
            return [doc.problem(path, f"{error.instance!r} is not a safe name: use lower-case letters, "
                                "digits, '.', '_' and '-', starting with a letter or digit")]
        case "pattern" if error.schema.get("pattern", "").startswith("^[A-Za-z_]"):
            return [doc.problem(path, f"{error.instance!r} is not a column name: use letters, digits "
                                "and '_', starting with a letter or '_'")]
        case "anyOf" if path and path[-1] == "weight":
            return [doc.problem(path, f"{doc.text(path) or error.instance!r} is not a decimal, a fraction, or a "
                                "mapping of level: weight; write e.g. 2, \"1/2\" or {root: 1, STATE: 1, PUMA: 4}")]
        case "anyOf" if any("level_epsilons" in str(x) for x in error.schema.get("anyOf", [])):
            return [_budget_problem(doc, path, error.instance)]
        case "oneOf" if "exact_number" in str(error.schema_path) or _is_exact_number(error.schema):
            return [doc.problem(path, f"{doc.text(path) or error.instance!r} is not a decimal or a "
                                "fraction; write e.g. 0.1 or \"1/10\"")]
        case "maxProperties" if isinstance(error.instance, dict):
            keys = ", ".join(str(k) for k in error.instance)
            return [doc.problem(path, f"too many keys ({keys}): at most {error.schema['maxProperties']}; a budget "
                                "is epsilon: (with delta: under approx) or rho:, not both")]
        case "minProperties" if isinstance(error.instance, dict):
            return [doc.problem(path, "the mapping is empty; a budget is epsilon: E (with delta: D under approx) "
                                "or rho: R under zcdp")]
        case "minItems" if error.schema.get("minItems") == 1:
            return [doc.problem(path, "the list is empty; give at least one item")]
        case "uniqueItems":
            items = [json.dumps(v, sort_keys=True) for v in error.instance]
            twice = next((v for i, v in enumerate(items) if v in items[:i]), None)
            what = f"{twice} is listed twice" if twice is not None else "an item is listed twice"
            return [doc.problem(path, f"{what}; list each item once")]
        case "enum":
            allowed = " | ".join(str(v) for v in error.schema["enum"])
            return [doc.problem(path, f"{error.instance!r} is not allowed; use one of: {allowed}")]
        case "const":
            return [doc.problem(path, f"{error.instance!r} is not supported; only {error.schema['const']!r}")]
        case "type" | "minLength" if path == ("output_dir",):
            shown = doc.text(path) if doc.text(path) is not None else _kind(error.instance)
            return [doc.problem(path, f"{shown!r} is not a directory; write a path relative to this spec file "
                                "(or absolute), e.g. output_dir: ../outputs")]
        case "type" if isinstance(error.schema["type"], list) and "boolean" in error.schema["type"]:
            return [doc.problem(path, f"expected a single value such as 1 or \"text\", found "
                                f"{doc.text(path) if doc.text(path) is not None else _kind(error.instance)!r}")]
        case "type":
            want = error.schema["type"]
            want = " or ".join(want) if isinstance(want, list) else want
            shown = doc.text(path) if doc.text(path) is not None else _kind(error.instance)
            return [doc.problem(path, f"expected {_article(want)}, found {shown!r}")]
    return [doc.problem(path, error.message)]


def _budget_problem(doc: Document, path: Path_, instance: Any) -> Problem:
    """One problem for a table's budget that is neither a number, a budget per level nor auto, in
    the unit of the key written (``rho: atuo`` speaks of ρ). A mapping is reported here once, as a
    whole: the table checker leaves its levels' values alone (:func:`Reader.reported`)."""
    key = str(path[-1])
    symbol, a = ("ρ", "a") if key == "rho" else ("ε", "an")
    if isinstance(instance, dict):
        if "auto" in instance.values():
            return doc.problem(path, f"auto is for a whole table, its levels included: write {key}: auto (the planner "
                               f"splits the table's {symbol} between its levels too), or {a} {symbol} for every level")
        bad = ", ".join(f"{level} {doc.text(path + (level,)) or _kind(value)!r}" for level, value in instance.items()
                        if not _is_number_text(doc.text(path + (level,)), value))
        return doc.problem(path, f"{a} {symbol} per level is a decimal or a fraction at every level, not {bad or 'this'}; "
                           f"write e.g. {key}: {{root: 0.1, STATE: 0.2}}")
    written = doc.text(path) or repr(instance)
    auto = f"{key}: auto (the planner splits the release's {symbol})"
    numbers = (f"a decimal or a fraction ({key}: 0.1 or {key}: \"1/10\"), or {a} {symbol} per level "
               f"({key}: {{root: 0.1, STATE: 0.2}})")
    if isinstance(instance, str) and difflib.get_close_matches(instance.strip().lower(), ["auto"], n=1):
        return doc.problem(path, f"{written} is not {a} {symbol}; did you mean {auto}? Otherwise write {numbers}")
    return doc.problem(path, f"{written} is not {a} {symbol}; write {auto}, or {numbers}")


def _is_number_text(text: str | None, value: Any) -> bool:
    """Whether a level's value reads as an exact number (as the table checker parses it)."""
    try:
        parse_budget(text, value, what="level")
    except NotANumber:
        return False
    return True


def _is_exact_number(schema_: dict[str, Any]) -> bool:
    return isinstance(schema_.get("oneOf"), list) and any(
        s.get("type") == "number" for s in schema_["oneOf"] if isinstance(s, dict))


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", type(None): "nothing"}.get(type(value), type(value).__name__)


def _article(noun: str) -> str:
    nouns = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
             "number": "a number", "boolean": "true/false"}
    return " or ".join(nouns.get(n, n) for n in noun.split(" or "))
