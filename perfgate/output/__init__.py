"""Presentation: every table, summary, report and file perfgate writes goes through this package.

- `text`: number formatting, the one aligned text table, sparklines;
- `terminal`: what a pytest run, `perfgate compare` and `perfgate history` print;
- `markdown`: the one Markdown summary (job summary, pull-request comment);
- `report_data`: the benchmark report's data (groups of cases, history series, telemetry), pure;
- `files`: the one atomic writer.

Nothing here decides anything: verdicts come from `perfgate.gate`, results from `perfgate.results`.
"""
