"""One table of exit codes for pytest runs, every `perfgate` command and the scripts.

pytest's own numbers (pytest.ExitCode), so a script that calls both reads one meaning per code:

| code | meaning |
|---|---|
| 0 | all good |
| 1 | a failed case: a regression, a missed budget, an accuracy failure, a crash or time-out; `perfgate compare`: a regression |
| 2 | interrupted (Ctrl-C) |
| 3 | internal error: a bug in perfgate or pytest (please report it with the traceback) |
| 4 | bad input: an option, pyproject.toml, a baseline, result or model file, an output path that cannot be written; one line names it and the fix |
| 5 | nothing to run here: no CUDA device for a GPU-only command, no test selected |
"""

OK, FAILED, INTERRUPTED, INTERNAL_ERROR, BAD_INPUT, UNAVAILABLE = 0, 1, 2, 3, 4, 5
