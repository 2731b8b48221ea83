"""Build hook: ship the top-level ``styles/*.tcss`` inside the package as ``dayflow_tui/styles/``.

The stylesheets live at the top of the checkout (one place to edit them); a
wheel has no checkout, so ``build_py`` copies them into the built package,
where ``dayflow_tui.tui.app.styles_dir`` looks first. Metadata is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

STYLES = Path(__file__).resolve().parent / "styles"


class build_py_with_styles(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's styles/ directly
        target = Path(self.build_lib) / "dayflow_tui" / "styles"
        target.mkdir(parents=True, exist_ok=True)
        for sheet in sorted(STYLES.glob("*.tcss")):
            shutil.copy2(sheet, target / sheet.name)


setup(cmdclass={"build_py": build_py_with_styles})
