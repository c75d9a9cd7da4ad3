"""Where the Snakemake workflow (``Snakefile`` and ``workflow/``) is: in a clone or an editable install,
the repository root; in a regular install, the copy shipped inside the package (``thanos/_workflow``,
written by ``setup.py`` when the wheel is built).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # thanos/
SHIPPED = PACKAGE / "_workflow"  # the wheel's copy: Snakefile, workflow/
SHIPPED_FILES = ("Snakefile", "workflow")  # what setup.py copies, relative to the repository root


def _is_workflow_root(root: Path) -> bool:
    return (root / "Snakefile").is_file() and (root / "workflow" / "rules").is_dir()


def workflow_root() -> Path:
    """The directory holding ``Snakefile`` and ``workflow/``."""
    for root in (PACKAGE.parent, SHIPPED):
        if _is_workflow_root(root):
            return root
    raise FileNotFoundError(
        f"the Snakemake workflow is missing: neither {PACKAGE.parent} (a clone) nor {SHIPPED} (an "
        "installed wheel) holds Snakefile and workflow/rules; reinstall the package (pip install .)"
    )


def snakefile() -> Path:
    """The workflow's ``Snakefile``."""
    return workflow_root() / "Snakefile"
