"""The package's public names: each resolves to the object in its module, and importing the package
loads none of the heavy libraries; no module imports itself back through others (no import circle)."""
import ast
import subprocess
import sys

import pytest

import acesql_lib


@pytest.mark.parametrize("name,module", sorted(acesql_lib.PUBLIC.items()))
def test_each_public_name_is_the_object_of_its_module(name, module):
    import importlib

    assert getattr(acesql_lib, name) is getattr(importlib.import_module(f"acesql_lib.{module}"), name)
    assert name in acesql_lib.__all__ and name in dir(acesql_lib)


def test_the_package_imports_light_and_names_what_it_lacks():
    code = ("import sys, acesql_lib; print(sorted(m for m in ('torch', 'transformers', 'trl', 'vllm', 'pandas') "
            "if m in sys.modules)); print(acesql_lib.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        acesql_lib.no_such_name


def test_training_and_evaluation_start_without_the_table_libraries():
    """A GRPO or evaluation process scores SQL and trains; pandas (route tables) and statsmodels (the claims'
    statistics) load only where a table or a CI is made (0.36 s and 0.82 s of every such process's start)."""
    code = ("import sys, acesql_lib.train.grpo_run, acesql_lib.evaluation.evaluate, acesql_lib.train.distill; "
            "print(sorted(m for m in ('pandas', 'statsmodels') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_preflight_counts_a_runs_steps_without_loading_the_trainer():
    """Notebook 00's preflight table (and `python -m acesql_lib.pipeline.preflight`) reads the GRPO schedule from
    acesql_lib.train.schedule: importing the trainer for it loaded transformers' model classes, 4.8 s of the notebook."""
    code = ("import sys; from acesql_lib.config.profiles import load_config; from acesql_lib.pipeline.preflight import preflight_table; "
            "rows = preflight_table(load_config('paper'))[1]; "
            "print(sorted(m for m in ('transformers', 'acesql_lib.train.grpo', 'trl') if m in sys.modules), "
            "any(r.item == 'joint GRPO' and ' steps of ' in r.detail for r in rows))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] True", out


def _imports() -> dict[str, set[str]]:
    """Every acesql_lib module and the acesql_lib modules it imports (at any depth of its code, lazy imports
    included), read from the syntax trees."""
    import ast
    from pathlib import Path

    root = Path(acesql_lib.__file__).parent
    names = {}
    for path in root.rglob("*.py"):
        parts = ["acesql_lib", *path.relative_to(root).with_suffix("").parts]
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names]
                # `from . import batch` reads a submodule, not the package's own code
                found = subs + ([target] if node.module or not all(x in names for x in subs) else [])
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[module] |= {t for t in found if t in names and t != module}
    return graph


def test_no_module_of_the_library_imports_itself_back():
    import networkx as nx

    graph = _imports()
    assert len(graph) > 60 and sum(map(len, graph.values())) > 150  # the whole library was read
    assert "acesql_lib.runtime.jsonfiles" in graph["acesql_lib.data.schema"]
    cycles = list(nx.simple_cycles(nx.DiGraph([(a, b) for a, deps in graph.items() for b in deps])))
    assert cycles == [], cycles


# The packages from the bottom up: a module may import from its own package and from the packages below it.
# The root package sits just above `runtime`: it holds the version and the lazy public names, and imports
# the progress bars' setting only.
LAYERS = ("runtime", "", "roles", "config", "executor", "data", "models", "authors", "train", "evaluation", "reports",
          "pipeline")


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_the_packages_stand_in_layers_and_no_module_imports_upward():
    graph = _imports()
    packages = {_package(m) for m in graph}
    assert packages == set(LAYERS), packages ^ set(LAYERS)  # every package has its floor
    floor = {p: i for i, p in enumerate(LAYERS)}
    upward = sorted((a, b) for a, deps in graph.items() for b in deps if floor[_package(b)] > floor[_package(a)])
    assert upward == [], upward
    assert ("acesql_lib.train.grpo", "acesql_lib.roles.pool") in {(a, b) for a, d in graph.items() for b in d}


def test_each_package_says_what_it_owns():
    from pathlib import Path

    root = Path(acesql_lib.__file__).parent
    for init in sorted(root.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 60, init


MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 500, 80, 8


def test_every_module_and_function_of_the_library_is_small():
    """No module over 500 lines, no function over 80 lines or with more than 8 parameters (`self`/`cls` not
    counted): a larger piece is split, a longer parameter list passes its config section or a small dataclass."""
    from pathlib import Path

    root = Path(acesql_lib.__file__).parent
    large = []
    for path in sorted(root.rglob("*.py")):
        text, where = path.read_text(), path.relative_to(root.parent)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            large.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
                count = len(names) - (names[:1] in (["self"], ["cls"]))
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES or count > MAX_PARAMETERS:
                    large.append(f"{where}:{node.lineno} {node.name}: {lines} lines, {count} parameters")
    assert large == [], "\n".join(large)


def _prompt_style_uses() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(functions reading `<cfg>.model.prompt_style`, functions taking a prompt style as a parameter) of the library,
    each as (module path under acesql_lib, function name)."""
    from pathlib import Path

    root = Path(acesql_lib.__file__).parent
    reads, takes = set(), set()
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root).with_suffix(""))
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = fn.args
            if {"style", "prompt_style"} & {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
                takes.add((where, fn.name))
            if any(isinstance(n, ast.Attribute) and n.attr == "prompt_style" and isinstance(n.value, ast.Attribute)
                   and n.value.attr == "model" for n in ast.walk(fn)):
                reads.add((where, fn.name))
    return reads, takes


def test_the_prompt_style_is_read_where_a_stages_sampling_spec_is_built_and_travels_inside_it():
    """`model.prompt_style` is read where each stage's `SamplingSpec` is built (and by the tiny base's gold SFT
    samples, and evaluation's reuse key); every rollout phase, distillation's products, GRPO and its validation
    take it from the spec. A style parameter exists only where prompt texts are written."""
    reads, takes = _prompt_style_uses()
    assert reads == {("train/rollouts", "distill"), ("train/rollouts", "grpo"), ("train/rollouts", "validation"),
                     ("evaluation/evaluate", "evaluate"), ("evaluation/evaluate", "eval_key"),
                     ("pipeline/tinybase", "base_training_data")}, reads
    other_styles = {("data/schema", "to_ddl"), ("reports/figures", "set_style")}  # schema text, seaborn theme
    writers = {(m, f) for m, f in takes - other_styles if m != "roles/prompts"}
    assert writers == {("train/rollouts", "retriever_prompt"), ("train/rollouts", "generator_prompt"),
                       ("train/rollouts", "greedy"), ("pipeline/tinybase", "gold_samples")}, writers


def test_the_release_notes_the_package_and_its_metadata_name_one_version():
    """CHANGELOG.md's newest release heading, pyproject's version, the package's fallback version and the
    installed metadata (`acesql_lib.__version__`) are the same release."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(acesql_lib.__file__).parent.parent
    released = re.findall(r"^## (\d+\.\d+\.\d+)\s*$", (root / "CHANGELOG.md").read_text(), flags=re.M)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    fallback = re.search(r'__version__ = "([^"]+)"', (root / "acesql_lib" / "__init__.py").read_text()).group(1)
    assert released and released[0] == project == fallback == acesql_lib.__version__, (released[:1], project, fallback)
