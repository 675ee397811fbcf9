"""The package's layering, read from the source: every module of ``dprelease/`` is parsed with
``ast`` and every import in it (at any depth: function-level lazy imports too, and
``importlib.import_module("...")`` with a literal name) is checked against the rules below.
``test_the_checker_catches_each_rule`` feeds the checker small modules that break each rule, so
the check can fail."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from typing import Callable

from tests.conftest import ROOT

PACKAGE = ROOT / "dprelease"


def within(name: str, package: str) -> bool:
    """``name`` is ``package`` or one of its modules."""
    return name == package or name.startswith(package + ".")


@dataclass(frozen=True)
class Rule:
    text: str
    applies: Callable[[str], bool]  # to the importing module
    forbidden: Callable[[str], bool]  # of the imported names


WARM_CLIENT = ("dprelease.cli.warm", "dprelease.cli.warm.handoff", "dprelease.cli.warm.protocol")
WARM_CLIENT_MAY = ("dprelease.host", "dprelease.serve.server", "dprelease.serve.auth", "dprelease.cli.warm")


def _light(name: str) -> bool:
    """The standard library, or what the warm runner's client may import of dprelease."""
    return (name.split(".")[0] in sys.stdlib_module_names or name in ("__future__", "dprelease", "dprelease.errors", "dprelease.serve")
            or any(within(name, p) for p in WARM_CLIENT_MAY))


RULES = (
    Rule("only dprelease/serve/orchestrate.py imports prefect",
         lambda module: module != "dprelease.serve.orchestrate", lambda name: name.startswith("prefect")),
    Rule("no module outside dprelease/cli/ imports dprelease.cli (dprelease/__main__.py, `python -m dprelease`, "
         "is the CLI's entry point)",
         lambda module: not within(module, "dprelease.cli") and module != "dprelease.__main__",
         lambda name: within(name, "dprelease.cli")),
    Rule("dprelease.plan.* and dprelease.postprocess.* never import dprelease.data",
         lambda module: within(module, "dprelease.plan") or within(module, "dprelease.postprocess"),
         lambda name: within(name, "dprelease.data")),
    Rule("dprelease.mechanisms.* imports nothing from dprelease.spec, dprelease.plan, dprelease.ledger, dprelease.cli",
         lambda module: within(module, "dprelease.mechanisms"),
         lambda name: any(within(name, p) for p in ("dprelease.spec", "dprelease.plan", "dprelease.ledger",
                                                    "dprelease.cli"))),
    Rule("only dprelease/cli/ imports dprelease.serve.orchestrate (the library runs without an orchestrator: the "
         "lifecycle is handed one)",
         lambda module: not within(module, "dprelease.cli") and module != "dprelease.serve.orchestrate",
         lambda name: within(name, "dprelease.serve.orchestrate")),
    Rule("dprelease.accounting.* imports nothing of dprelease but dprelease.accounting",
         lambda module: within(module, "dprelease.accounting"),
         lambda name: within(name, "dprelease") and not within(name, "dprelease.accounting")),
    Rule("dprelease.host.files (the one file-mode rule, used by every writer, processes.py's cheap import among them) "
         "imports nothing of dprelease",
         lambda module: module == "dprelease.host.files",
         lambda name: within(name, "dprelease") and name != "dprelease.host.files"),
    Rule("only dprelease/publish/reading.py imports pandas (imported on first use of read_release; the CLI never pays for it)",
         lambda module: module != "dprelease.publish.reading", lambda name: within(name, "pandas")),
    Rule("dprelease.publish.reading reads published files only: it never imports dprelease.data, dprelease.ledger or "
         "dprelease.lifecycle",
         lambda module: module == "dprelease.publish.reading",
         lambda name: any(within(name, p) for p in ("dprelease.data", "dprelease.ledger", "dprelease.lifecycle"))),
    Rule("the data layer counts in one direction, scan → encode → count: dprelease.data.scan imports no other module "
         "of dprelease.data",
         lambda module: module == "dprelease.data.scan",
         lambda name: within(name, "dprelease.data") and not within(name, "dprelease.data.scan")),
    Rule("dprelease.data.load (encode) imports of dprelease.data only the scan and the array helpers",
         lambda module: module == "dprelease.data.load",
         lambda name: within(name, "dprelease.data") and not any(
             within(name, p) for p in ("dprelease.data.load", "dprelease.data.scan", "dprelease.data.arrays"))),
    Rule("dprelease.data.histogram and dprelease.data.partials (keys and partials) never import the counting above "
         "them (dprelease.data.count, dprelease.data.cluster)",
         lambda module: module in ("dprelease.data.histogram", "dprelease.data.partials"),
         lambda name: any(within(name, p) for p in ("dprelease.data.count", "dprelease.data.cluster"))),
    Rule("the warm runner's client (dprelease.cli.warm, its handoff and protocol: on the path of every `dprelease` "
         "command, docs/warm_runner.md) imports the standard library, dprelease.host, dprelease.serve.server, "
         "dprelease.serve.auth and the warm package only",
         lambda module: module in WARM_CLIENT, lambda name: not _light(name)),
)


def imported_names(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module name ``source`` imports, anywhere in it. ``from a import b`` counts as
    ``a`` and ``a.b`` (``b`` may be a module); relative imports are resolved against ``module``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
    return names


def _is_import_call(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or \
        (isinstance(func, ast.Attribute) and func.attr == "import_module")


def violations(modules: dict[str, tuple[str, bool]]) -> list[str]:
    """``modules``: module name → (source, is a package's __init__). Each broken rule, in words."""
    found = []
    for module, (source, is_package) in sorted(modules.items()):
        names = imported_names(source, module, is_package)
        for rule in RULES:
            if rule.applies(module):
                found += [f"{module} imports {name}: {rule.text}" for name in sorted(names) if rule.forbidden(name)]
    return found


def package_modules() -> dict[str, tuple[str, bool]]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path.read_text("utf-8"), is_package)
    return modules


def test_the_package_keeps_its_layering():
    modules = package_modules()
    print(f"read {len(modules)} modules of dprelease/; rules checked:")
    for rule in RULES:
        print(f"  - {rule.text}")
    assert len(modules) > 40 and "dprelease.serve.orchestrate" in modules and "dprelease.cli" in modules
    problems = violations(modules)
    assert not problems, "\n".join(problems)


def test_the_checker_catches_each_rule():
    broken = {  # one module per rule (and ways of importing), each must be caught by its rule
        "dprelease.spec.model": ("def f():\n    from prefect import flow\n", False),  # lazy, in a function
        "dprelease.lifecycle.measure": ("import prefect_dask\n", False),
        "dprelease.ledger.store": ("import dprelease.cli.render\n", False),
        "dprelease.report.markdown": ("from dprelease import cli\n", False),
        "dprelease.plan.planner": ("class A:\n    def m(self):\n        import dprelease.data.load\n", False),
        "dprelease.postprocess": ("from .. import data\n", True),  # relative, in a package's __init__
        "dprelease.mechanisms.gaussian": ("from dprelease.spec import Spec\n", False),
        "dprelease.mechanisms.local": ("import importlib\nimportlib.import_module('dprelease.ledger')\n", False),
        "dprelease.mechanisms.sampling": ("from ..plan import Plan\n", False),
        "dprelease.lifecycle.execute": ("def run():\n    from dprelease.serve.orchestrate import run_release\n", False),
        "dprelease.accounting.budgets": ("from dprelease.errors import InternalError\n", False),
        "dprelease.cli.render": ("def table():\n    import pandas as pd\n", False),
        "dprelease.publish.reading": ("from dprelease.data import encode\n", False),
        "dprelease.host.files": ("from dprelease.errors import UserError\n", False),
        "dprelease.cli.warm.handoff": ("def f():\n    import typer\n", False),
        "dprelease.data.scan": ("from dprelease.data.load import encode_batch\n", False),
        "dprelease.data.load": ("def f():\n    from dprelease.data.histogram import table_partials\n", False),
        "dprelease.data.histogram": ("from dprelease.data import count\n", False),
    }
    found = violations(broken)
    for module in broken:
        assert any(line.startswith(module + " imports") for line in found), (module, found)
    for rule in RULES:
        assert any(line.endswith(rule.text) for line in found), rule.text
    allowed = {  # near misses, each allowed
        "dprelease.serve.orchestrate": ("from prefect import flow\n", False),
        "dprelease.cli.common": ("from dprelease.cli.render import ledger_line\n", False),
        "dprelease.__main__": ("from dprelease.cli import main\n", False),
        "dprelease.plan.planner": ("import dprelease.database\nfrom dprelease.spec import Spec\n", False),
        "dprelease.mechanisms.sampling": ("from dprelease.accounting import fraction_text\n", False),
        "dprelease.lifecycle.execute": ("from dprelease.data import file_fingerprint\n", False),
        "dprelease.cli.release_cmds": ("from dprelease.serve.orchestrate import run_release\n", False),
        "dprelease.accounting.relations": ("from dprelease.accounting.budgets import Kind\n", False),
        "dprelease.publish.reading": ("import pandas as pd\nfrom dprelease.publish.layout import table_path\n", False),
        "dprelease.cli.warm.protocol": ("import hashlib\nfrom dprelease.host.processes import alive\n", False),
        "dprelease.data.load": ("from dprelease.data.scan import Source\nfrom dprelease.data.arrays import rank_within\n",
                                False),
        "dprelease.data.partials": ("from dprelease.errors import DataError\n", False),
    }
    assert violations(allowed) == []


def test_no_module_reads_the_fault_injection_variables():
    """Fault injection is a hook a test installs (tests/faulty_cli.py), never the environment."""
    readers = [name for name, (source, _) in package_modules().items() if "DPRELEASE_FAULT" in source]
    assert readers == []
