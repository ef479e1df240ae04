"""The case runner, without pytest: a frozen run configuration and a case in, a frozen outcome out.

`config.RunConfig` is what the run was asked to do; `runner.Host` what this machine is (its
fingerprint, the variants it can run, its baselines); `runner.Runner` measures and judges one case
and returns a `outcome.CaseOutcome` (the record, the verdicts, or why it was skipped or failed);
`outcome.RunOutcome` is the whole run, built once at its end (from the cases' outcomes, or from
merged worker files) and read by the outputs, the recording, the verdicts file and the merges.
The pytest plugin (perfgate.plugin) only adapts pytest to it; a script uses it directly:

    host = Host.detect(config)
    runner = Runner(config=config, host=host)
    outcome = runner.run(case, case.id)
"""
