"""The next notebook's kernel, started and importing that notebook's modules while the current one runs.

Each pipeline notebook runs in a fresh kernel, and every kernel spends its first seconds starting (about 3 s on
the 2-core CPU) and importing torch, transformers, pandas and the kit (3-5 s) before any work of its notebook.
`WarmKernel` starts notebook k+1's kernel when notebook k starts, and sends it one silent
request that imports every module named by an import statement of notebook k+1 (`modules_imported`). The
notebook then runs in that kernel as it would in a cold one: its own cells, in order, from the parameters on;
only the import statements find their modules already loaded. Nothing else runs in the kernel first: no
notebook code, no parameters, no history (`store_history=False`, so the first cell is still `[1]`).

What differs from a cold kernel: warnings a module emits when imported are not shown (the pre-import's output
is not kept; a cold kernel prints them in the first cell), and two kernels are alive at once for a while (one
more Python process with torch imported, ~0.4 GB). `PipelineOptions(warm_next=False)` (`--cold-kernels`) runs
every notebook in a kernel started for it, as papermill does on its own.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any


def modules_imported(nb: Path) -> list[str]:
    """The modules named by `import M` and `from M import ...` in the notebook's code cells, in order of first
    appearance; cells that are not plain Python (magics) are skipped. A notebook that cannot be read gives none:
    its own run then fails, naming it."""
    try:
        cells = json.loads(Path(nb).read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    names: list[str] = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
    return list(dict.fromkeys(names))


def warm_code(modules: list[str]) -> str:
    """Import each module, leaving no name behind; one that fails is left for the notebook's own import to report,
    with its cell."""
    return ("def _acesql_warm(names):\n"
            "    import importlib\n"
            "    for name in names:\n"
            "        try:\n"
            "            importlib.import_module(name)\n"
            "        except Exception:\n"
            "            pass\n"
            f"_acesql_warm({modules!r})\n"
            "del _acesql_warm\n")


class WarmKernel:
    """A kernel started in the notebook's folder with `env`, importing the notebook's modules (not waited for)."""

    def __init__(self, nb: Path, kernel: str, env: dict[str, str]):
        from jupyter_client.manager import AsyncKernelManager
        from jupyter_core.utils import run_sync

        self.nb = Path(nb)
        code = warm_code(modules_imported(self.nb))
        self.km = AsyncKernelManager(kernel_name=kernel)
        run_sync(self.km.start_kernel)(cwd=str(self.nb.parent), env=env)
        self._client = self.km.blocking_client()
        self._client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)  # the reply only
        self._request = self._client.execute(code, silent=True, store_history=False)

    def ready(self) -> Any:
        """Wait until the pre-import has finished (papermill's own start-up check would otherwise queue behind
        it, under its 60 s limit), then hand over the kernel manager for papermill's `km`. A kernel that died
        meanwhile is handed over as it is: papermill then reports it, naming the notebook."""
        import queue

        from jupyter_core.utils import run_sync

        while self._client is not None:
            try:
                reply = self._client.get_shell_msg(timeout=1.0)
            except queue.Empty:
                if not run_sync(self.km.is_alive)():
                    self._close_client()
                continue
            if reply["parent_header"].get("msg_id") == self._request:
                self._close_client()
        return self.km

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.stop_channels()
            self._client = None

    def shutdown(self) -> None:
        """Stop the kernel (after its notebook ran, or unused when the pipeline stops first)."""
        from jupyter_core.utils import run_sync

        self._close_client()
        if run_sync(self.km.is_alive)():
            run_sync(self.km.shutdown_kernel)(now=True)
        run_sync(self.km.cleanup_resources)()
