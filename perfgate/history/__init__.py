"""History of saved runs: series per case over time and commit, and change points."""
