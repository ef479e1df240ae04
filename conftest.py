"""Root conftest: loads the perfgate plugin (its options and hooks); no logic here."""

pytest_plugins = ("perfgate.plugin", "perfgate.dist_plugin", "perfgate.parallel_plugin")
