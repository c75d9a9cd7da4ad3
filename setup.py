"""Ships the Snakemake workflow inside the wheel: ``Snakefile`` and ``workflow/`` (top level of the
repository) are copied to ``thanos/_workflow/`` when the package is built, so that ``thanos prune-model``
works from a regular ``pip install .`` (thanos.runner.workflow_files finds them there). Everything else is in
pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED_FILES = ("Snakefile", "workflow")  # thanos/runner/workflow_files.py: SHIPPED_FILES
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")


class BuildWithWorkflow(build_py):
    """build_py that also copies the workflow files into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the repository
            return
        target = Path(self.build_lib) / "thanos" / "_workflow"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in SHIPPED_FILES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=IGNORE)
            else:
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildWithWorkflow})
