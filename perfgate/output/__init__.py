"""Presentation: every table, summary, report and file perfgate writes goes through this package.

- `text`: number formatting, the one aligned text table, sparklines;
- `terminal`: what a pytest run, `perfgate compare` and `perfgate history` print;
- `markdown`: the one Markdown summary (job summary, pull-request comment);
- `report_data`: the benchmark report's data (groups of cases, history series, telemetry), pure;
- `charts`: plots drawn with matplotlib into inline SVG (imported only when a chart is drawn);
- `html`: the Jinja2 templates (templates/) of the benchmark report and the profiler's report;
- `files`: the one atomic writer.

Nothing here decides anything: verdicts come from `perfgate.gate`, results from `perfgate.results`.
"""
