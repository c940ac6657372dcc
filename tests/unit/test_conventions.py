"""The library's conventions, checked: the rules of the project's plan that a reader of the code
can rely on, read from the source itself (no import of the modules, except where the rule is
about importing).

* no module uses another module's private (underscore) name;
* the modules' top-level imports form no cycle;
* the packages (model, perf, parallel, ...) import each other in one direction only, counting
  every import, function-local ones too;
* perf/ and parallel/ define each public name once;
* no module outside the grading question sets is longer than 300 lines;
* `import inferbook` (and each part's package, and the CLI up to its parser) starts no JAX;
* no function, class or module is named after a person or a source (cite them in docstrings);
* every one-letter shape suffix of a variable (`x_BTD`, `cache_k_BKSH`) is defined on the
  notation page.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib"
PACKAGE = LIB / "inferbook"
# Reader-facing code that must keep to the library's public interface too.
READER_CODE = sorted([*(ROOT / "chapters").glob("*.py"), *(ROOT / "exercises").glob("*.py"),
                      *(ROOT / "book").glob("*.py")])
MAX_LINES = 300
# Names of people and sources that have been used as code names; a function says what it
# computes and cites its source in the docstring.
PERSONS = {"kipply", "pope", "lienhart", "austin", "dao", "dettmers", "shazeer", "leviathan",
           "vaswani", "kwon", "karpathy", "chinchilla", "jetstream", "vllm", "sglang",
           "nanogpt", "gpt_fast", "xiao", "zhang", "ainslie", "beltagy", "milakov",
           "rabe", "staats", "hong", "brandon", "jiang", "touvron", "kaplan", "hoffmann"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Statements that run at import: the module body, into if/try blocks, skipping
    `if TYPE_CHECKING:` (annotations only)."""
    out: list[ast.stmt] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                stack[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack[:0] = node.body + node.orelse + node.finalbody + [
                s for h in node.handlers for s in h.body]
        else:
            out.append(node)
    return out


def _imported_modules(module: str, tree: ast.Module) -> set[str]:
    """inferbook modules imported at module level (a package's __init__ counts when a module
    below it is imported, unless it is one of the importer's own packages)."""
    names: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            names.add(target)
            names.update(f"{target}.{a.name}" for a in node.names
                         if f"{target}.{a.name}" in MODULES)
    own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in MODULES and prefix not in own and prefix != module:
                out.add(prefix)
    return out


def _private_uses(module: str | None, tree: ast.Module) -> list[str]:
    """`from inferbook.x import _name` and `x._name` where x is a bound inferbook module."""
    found = []
    bound: dict[str, str] = {}         # local name -> inferbook module it refers to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("inferbook"):
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound["inferbook"] = "inferbook"
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node) if module else (node.module or "")
            if not target.startswith("inferbook"):
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"line {node.lineno}: from {target} import {a.name}")
                if f"{target}.{a.name}" in MODULES:
                    bound[a.asname or a.name] = f"{target}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            chain = ast.unparse(node.value).split(".")
            if chain[0] in bound:
                target = ".".join([bound[chain[0]], *chain[1:]])
                if target in MODULES and target != module:
                    found.append(f"line {node.lineno}: {target}.{node.attr}")
    return found


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def test_no_module_uses_another_modules_private_names():
    offenders = []
    for name, tree in _trees().items():
        offenders += [f"{name}: {use}" for use in _private_uses(name, tree)]
    for path in READER_CODE:
        tree = ast.parse(path.read_text(), str(path))
        offenders += [f"{path.relative_to(ROOT)}: {use}" for use in _private_uses(None, tree)]
    assert not offenders, "private names used outside their module:\n" + "\n".join(offenders)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    graph = {name: _imported_modules(name, tree) for name, tree in _trees().items()}
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def _package(module: str) -> str:
    """The part of the library a module belongs to: `inferbook.perf.roofline` -> "perf"."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and module in MODULES
                          and MODULES[module].name == "__init__.py"):
        return parts[1]
    return parts[0]


def _imports_anywhere(module: str, tree: ast.Module) -> set[str]:
    """Every inferbook module `module` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("inferbook"))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target.startswith("inferbook"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names
                             if f"{target}.{a.name}" in MODULES)
    return found


def _package_graph(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Which package imports which (the root package `inferbook` itself left out: it is the
    entry point, `inferbook.setup`, and imports what it offers)."""
    graph: dict[str, set[str]] = {}
    for module, tree in trees.items():
        source = _package(module)
        if source == "inferbook":
            continue
        targets = {_package(t) for t in _imports_anywhere(module, tree)}
        graph.setdefault(source, set()).update(t for t in targets
                                               if t not in (source, "inferbook"))
    return graph


def test_no_import_cycle_between_packages():
    graph = _package_graph(_trees())
    assert not _cycles(graph), f"packages that import each other: {_cycles(graph)}"


def test_the_package_scan_sees_a_function_local_import():
    trees = {
        "inferbook.perf.cost": ast.parse("from inferbook.model import config\n"),
        "inferbook.model.config": ast.parse(
            "def late():\n    from inferbook.perf import cost\n    return cost\n"),
    }
    assert _cycles(_package_graph(trees)) == [["model", "perf"]]
    trees["inferbook.model.config"] = ast.parse("def late():\n    return 1\n")
    assert _cycles(_package_graph(trees)) == []


def _public_definitions(tree: ast.Module) -> set[str]:
    """Public names a module defines at its top: functions, classes, constants."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def _defined_twice(trees: dict[str, ast.Module], packages: tuple[str, ...]) -> dict:
    where: dict[str, list[str]] = {}
    for module, tree in trees.items():
        if _package(module) in packages and module.count(".") == 2:
            for name in _public_definitions(tree):
                where.setdefault(name, []).append(module)
    return {name: mods for name, mods in where.items() if len(mods) > 1}


def test_the_cost_models_and_the_layouts_define_each_public_name_once():
    """One name per concept in perf/ and parallel/: a reader who meets `collective_time`
    or `LAYOUTS` knows which one is meant."""
    twice = _defined_twice(_trees(), ("perf", "parallel"))
    assert not twice, f"public names defined in several modules: {twice}"


def test_the_name_scan_sees_a_name_defined_twice():
    trees = {"inferbook.perf.a": ast.parse("def step_time():\n    pass\n"),
             "inferbook.parallel.b": ast.parse("step_time = 1\n_private = 2\n"),
             "inferbook.perf.c": ast.parse("def _private():\n    pass\n")}
    assert _defined_twice(trees, ("perf", "parallel")) == {
        "step_time": ["inferbook.perf.a", "inferbook.parallel.b"]}


def test_no_module_is_longer_than_the_limit():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES
            and not name.startswith("inferbook.grading.chapters.")}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


LIGHT_IMPORTS = """
import sys
import inferbook
import inferbook.model, inferbook.perf, inferbook.memory, inferbook.kernels
import inferbook.parallel, inferbook.book, inferbook.grading
from inferbook.cli import build_parser
build_parser()
loaded = sorted(m for m in sys.modules if m == "jax" or m.startswith("jax."))
assert not loaded, loaded
"""


def test_importing_the_packages_and_the_cli_parser_starts_no_jax():
    done = subprocess.run([sys.executable, "-c", LIGHT_IMPORTS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def _name_parts(name: str) -> set[str]:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return set(snake.strip("_").split("_"))


def test_nothing_is_named_after_a_person_or_a_source():
    offenders = [f"module {name}" for name in MODULES
                 if _name_parts(name.rsplit(".", 1)[-1]) & PERSONS]
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and _name_parts(node.name) & PERSONS:
                offenders.append(f"{name}.{node.name} (line {node.lineno})")
    assert not offenders, "named after a person or source:\n" + "\n".join(offenders)


def test_the_name_check_sees_a_persons_name():
    assert _name_parts("kipply_flops") & PERSONS
    assert _name_parts("PopeLatency") & PERSONS
    assert not _name_parts("step_time") & PERSONS


# A shape suffix: what follows the last underscore of a lowercase name, letters and digits with
# at least one capital of the book's notation (`x_BTD`, `mask_B1MS`, `w_DV`, `lengths_B`);
# lowercase letters inside it are parts of a dimension, which the notation page explains.
SUFFIX = re.compile(r"(?P<stem>.*[a-z].*)_(?P<suffix>[A-Za-z0-9]*[A-Z][A-Za-z0-9]*)")


def _shape_letters(name: str) -> set[str] | None:
    m = SUFFIX.fullmatch(name)
    return None if m is None else set(re.findall("[A-Z]", m.group("suffix")))


def _variable_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _notation_letters() -> tuple[set[str], set[str]]:
    """The letters the notation page defines: those in its tables' first column, capitals and
    lowercase apart."""
    text = (ROOT / "book" / "notation.md").read_text()
    found: set[str] = set()
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            first = line.strip().strip("|").split("|")[0]
            found.update(re.findall(r"\$([A-Za-z])(?:_[{A-Za-z0-9_}]+)?\$", first))
    return {c for c in found if c.isupper()}, {c for c in found if c.islower()}


def _letters_used() -> dict[str, set[str]]:
    """Every letter of a shape suffix in the library, with the names that use it."""
    used: dict[str, set[str]] = {}
    for name, tree in _trees().items():
        for var in _variable_names(tree):
            m = SUFFIX.fullmatch(var)
            for letter in set(re.findall("[A-Za-z]", m.group("suffix"))) if m else ():
                used.setdefault(letter, set()).add(f"{name}: {var}")
    return used


def test_every_shape_suffix_letter_is_on_the_notation_page():
    capitals, lowercase = _notation_letters()
    assert {"B", "T", "S", "D", "F", "N", "K", "G", "H", "L", "V"} <= capitals
    missing = {letter: sorted(where)[:3] for letter, where in _letters_used().items()
               if letter not in (capitals if letter.isupper() else lowercase)}
    assert not missing, f"shape letters not on book/notation.md: {missing}"


@pytest.mark.parametrize("name, letters", [
    ("x_BTD", {"B", "T", "D"}), ("k_cache_BKSH", {"B", "K", "S", "H"}),
    ("x_BTnH", {"B", "T", "H"}), ("mask_B1MS", {"B", "M", "S"}), ("lengths_B", {"B"}),
    ("tokens", None), ("max_len", None), ("hbm_bytes", None), ("MAX_LEN", None),
    ("INT32_MAX", None)])
def test_shape_suffixes_are_read_as_letters(name, letters):
    assert _shape_letters(name) == letters


def test_the_notation_page_is_read_letter_by_letter():
    capitals, lowercase = _notation_letters()
    assert {"M", "C", "J", "P", "R", "E", "A", "X", "Z"} <= capitals
    assert {"d", "f", "e", "h", "k", "q"} <= lowercase
