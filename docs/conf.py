"""Sphinx configuration for proxy-component's docs: Markdown pages (MyST), built with warnings as errors.

Build: `.venv/bin/sphinx-build -W --keep-going -b html docs build/docs` (what scripts/test runs). Every page
under docs/ is in a toctree; a link to a missing page or heading is a warning (myst.xref_missing), so an error.
"""

project = "proxy-component"
author = "proxy-component contributors"
copyright = "proxy-component contributors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings up to ### get anchors, as GitHub's own: `guides/check.md#exit-codes` resolves here and on GitHub.
myst_heading_anchors = 3
# The Pulumi Registry's pages (_index.md, installation-configuration.md) carry their title in front matter.
myst_title_to_header = True

html_theme = "alabaster"
html_title = "proxy-component"
html_show_sourcelink = False
