"""Presentation: every table, summary, report and file perfgate writes goes through this package.

- `files`: the one atomic writer.
"""
